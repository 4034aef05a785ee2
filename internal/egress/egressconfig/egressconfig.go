// Package egressconfig defines the trusted configuration sections of the
// egress gateway — [network] (policy mode, ordered rules, DNS), [gateway]
// (listeners, CA bundles, timeouts, limits) [secrets.NAME] and [logins.NAME] — as TOML wire
// structs (pointer fields, so "unset" differs from "zero"), and validates
// them into runtime types. Every validation error names the file, the key
// path with indexes (network.rules[3].hosts[0]) and the value at fault; a
// gateway with any invalid rule refuses to start.
//
// internal/config embeds Sections in its File struct and calls Validate;
// LoadFile decodes a standalone file with the same types (the gateway's
// --config, and tests).
package egressconfig

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"vak/internal/egress/asks"
	"vak/internal/egress/logins"
	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
	"vak/internal/netpolicy"
	"vak/internal/suggest"
)

// Sections are the wire structs of the gateway's config sections.
type Sections struct {
	Network *Network           `toml:"network"`
	Gateway *Gateway           `toml:"gateway"`
	Secrets map[string]*Secret `toml:"secrets"`
	// Logins are [logins.NAME]: OAuth logins whose tokens the sandbox
	// gets only as phantoms (logins.go).
	Logins map[string]*Login `toml:"logins"`

	// validated is what Validate made of these sections (Validated).
	validated *Config
}

// ErrNotValidated is returned by Sections.Validated for sections that
// Validate has not accepted: vak validates its config once per start
// (internal/config) and passes the result down with the sections.
var ErrNotValidated = fmt.Errorf("%w: the sections were never validated", ErrInvalid)

// Validated returns the Config that Validate built from s, without
// validating again; the sections must not have changed since. Sections
// Validate never accepted are ErrNotValidated.
func (s *Sections) Validated() (*Config, error) {
	if s == nil || s.validated == nil {
		return nil, ErrNotValidated
	}
	return s.validated, nil
}

// Network is [network].
type Network struct {
	// Policy is "none" (no network) or "proxied" (through the gateway).
	Policy *string `toml:"policy"`
	Rules  []Rule  `toml:"rules"`
	// Presets name built-in allow-rule sets (see Presets), appended after
	// Rules, so that a user's own deny rule wins over a preset.
	Presets []string `toml:"presets"`
	DNS     *DNS     `toml:"dns"`
	// Ask holds a request no rule allows (not one a deny rule refuses)
	// until a person answers it over the admin socket (vak gateway asks),
	// instead of refusing it at once (internal/egress/asks). Default false.
	Ask *bool `toml:"ask"`
	// AskTimeout is how long such a request waits for an answer
	// (default "30s", at most "10m").
	AskTimeout *string `toml:"ask_timeout"`
}

// Rule is one [[network.rules]] entry.
type Rule struct {
	Name *string `toml:"name"`
	// Action is "allow" (default) or "deny".
	Action *string `toml:"action"`
	// Protocol is "http" (default: HTTP and HTTPS requests), "tcp" (other
	// TCP, needs explicit hosts and ports) or "udp" (not relayed yet).
	Protocol  *string  `toml:"protocol"`
	Hosts     []string `toml:"hosts"`
	CIDRs     []string `toml:"cidrs"`
	Methods   []string `toml:"methods"`
	Ports     []int64  `toml:"ports"`
	Paths     []string `toml:"paths"`
	WebSocket *bool    `toml:"websocket"`
	// AllowForeignCredentials lets requests matched by this allow rule
	// carry credentials other than a bound secret's placeholder.
	AllowForeignCredentials *bool `toml:"allow_foreign_credentials"`
}

// DNS is [network.dns].
type DNS struct {
	// Upstream DNS servers ("ip" or "ip:port"); empty means the system
	// resolver of the gateway host.
	Upstream []string `toml:"upstream"`
	// Overrides pin names to addresses; answers are still subject to the
	// non-public address check.
	Overrides map[string][]string `toml:"overrides"`
	// Block is the answer for names no rule allows: "sinkhole" (default)
	// or "nxdomain".
	Block *string `toml:"block"`
	// Sinkhole is the IPv4 address of the sinkhole answer.
	Sinkhole *string `toml:"sinkhole"`
}

// Block answers of [network.dns] block.
const (
	BlockSinkhole = "sinkhole"
	BlockNXDomain = "nxdomain"
)

// DefaultSinkhole is the sinkhole answer's address: in 198.18.0.0/15
// (RFC 2544, never globally routed). In the proxied topology every TCP
// connection of the sandbox goes to the gateway whatever its destination,
// so the gateway answers connections to it.
var DefaultSinkhole = netip.MustParseAddr("198.18.0.1")

// Gateway is [gateway].
type Gateway struct {
	// Listen is the explicit proxy address (HTTP CONNECT, absolute-form).
	Listen *string `toml:"listen"`
	// TransparentListen accepts PROXY v2 or REDIRECTed connections.
	TransparentListen *string `toml:"transparent_listen"`
	// DNSListen serves the policy-aware resolver (UDP and TCP).
	DNSListen *string `toml:"dns_listen"`
	// AdminSocket is the unix socket for reload, status and revoke.
	AdminSocket *string `toml:"admin_socket"`
	// Receipts is the JSONL receipts log path.
	Receipts *string `toml:"receipts"`
	// ExtraCABundles are PEM files trusted for upstream TLS besides the
	// system roots (corporate proxies).
	ExtraCABundles []string  `toml:"extra_ca_bundles"`
	MaxHeaderBytes *int64    `toml:"max_header_bytes"`
	Timeouts       *Timeouts `toml:"timeouts"`
}

// Timeouts is [gateway.timeouts]; values are Go durations ("10s").
type Timeouts struct {
	ReadHeader     *string `toml:"read_header"`
	Idle           *string `toml:"idle"`
	Dial           *string `toml:"dial"`
	TLSHandshake   *string `toml:"tls_handshake"`
	ResponseHeader *string `toml:"response_header"`
}

// Secret is [secrets.NAME]: exactly one of Value, Env, File.
type Secret struct {
	Value *string `toml:"value"`
	Env   *string `toml:"env"`
	File  *string `toml:"file"`
	// Hosts are host patterns the secret may be sent to (required).
	Hosts []string `toml:"hosts"`
	// Inject lists places: "header" (default), "query", "body".
	Inject []string `toml:"inject"`
	// AllowPlaintext lets the value be substituted into requests that leave
	// the gateway unencrypted (plain HTTP, raw TCP).
	AllowPlaintext *bool `toml:"allow_plaintext"`
	// AllowForeignCredentials lets requests to Hosts carry credentials
	// other than this secret's placeholder.
	AllowForeignCredentials *bool `toml:"allow_foreign_credentials"`
	// AWS makes the secret part of an AWS access key ("access_key_id",
	// "secret_access_key", "session_token"): never substituted as text,
	// the gateway re-signs SigV4 requests to Hosts with it instead.
	AWS *string `toml:"aws"`
}

// Defaults.
const (
	DefaultListen            = "127.0.0.1:3128"
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultDialTimeout       = 10 * time.Second
	DefaultTLSHandshake      = 10 * time.Second
	// DefaultResponseHeaderTimeout is 0: model APIs may think for minutes.
	DefaultResponseHeaderTimeout = 0
	// MaxMaxHeaderBytes caps max_header_bytes.
	MaxMaxHeaderBytes = 1 << 20
)

// Config is the validated gateway configuration.
type Config struct {
	// Mode is network.policy (netpolicy.None when unset).
	Mode   netpolicy.Policy
	Policy *policy.Policy
	DNS    DNSConfig
	// Gateway holds listener and limit settings; empty strings mean "use the
	// default" (the caller fills state-dir paths).
	Gateway GatewayConfig
	Secrets []secrets.Spec
	// Logins are the validated [logins.NAME], in name order.
	Logins []logins.Provider
	// Ask is network.ask; AskTimeout network.ask_timeout (set when Ask).
	Ask        bool
	AskTimeout time.Duration
}

// MaxAskTimeout bounds network.ask_timeout.
const MaxAskTimeout = 10 * time.Minute

// DNSConfig is the validated [network.dns].
type DNSConfig struct {
	Upstreams []string
	Overrides map[string][]netip.Addr
	// Sinkhole is the block answer's address; invalid means NXDOMAIN.
	Sinkhole netip.Addr
}

// GatewayConfig is the validated [gateway].
type GatewayConfig struct {
	Listen            string
	TransparentListen string
	DNSListen         string
	AdminSocket       string
	Receipts          string
	ExtraCABundles    []string
	MaxHeaderBytes    int
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	DialTimeout       time.Duration
	TLSHandshake      time.Duration
	ResponseHeader    time.Duration
}

// ErrInvalid is wrapped by every validation and decoding error.
var ErrInvalid = errors.New("invalid gateway configuration")

// FieldError names the file and key path at fault.
type FieldError struct {
	File  string
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s: %v", e.File, e.Field, e.Err)
}

func (e *FieldError) Unwrap() []error { return []error{ErrInvalid, e.Err} }

// Validate checks the sections decoded from file and builds a Config.
// Missing sections get defaults: no rules (everything denied), system DNS,
// DefaultListen, no secrets. The sections are checked in file order
// (network policy and rules, presets, DNS, gateway, secrets); the first
// error is returned. The Config is also kept with s (Sections.Validated).
func Validate(file string, s *Sections) (*Config, error) {
	if s == nil {
		s = &Sections{}
	}
	net_ := s.Network
	if net_ == nil {
		net_ = &Network{}
	}
	cfg := &Config{}
	var err error
	if cfg.Mode, err = validateMode(file, net_.Policy); err != nil {
		return nil, err
	}
	if cfg.Policy, err = validatePolicy(file, net_); err != nil {
		return nil, err
	}
	if cfg.DNS, err = validateDNS(file, net_.DNS); err != nil {
		return nil, err
	}
	if cfg.Ask, cfg.AskTimeout, err = validateAsk(file, net_); err != nil {
		return nil, err
	}
	if cfg.Gateway, err = validateGateway(file, s.Gateway); err != nil {
		return nil, err
	}
	if cfg.Secrets, err = validateSecrets(file, s.Secrets); err != nil {
		return nil, err
	}
	if cfg.Logins, err = validateLogins(file, s.Logins); err != nil {
		return nil, err
	}
	s.validated = cfg
	return cfg, nil
}

// fieldError is the FieldError of field in file.
func fieldError(file, field, format string, args ...any) error {
	return &FieldError{File: file, Field: field, Err: fmt.Errorf(format, args...)}
}

// validateMode parses network.policy (unset means netpolicy.None; set, it
// must name a policy).
func validateMode(file string, mode *string) (netpolicy.Policy, error) {
	if mode == nil {
		return netpolicy.None, nil
	}
	if p, err := netpolicy.Parse(*mode); err == nil && *mode != "" {
		return p, nil
	}
	return "", fieldError(file, "network.policy", "%q: want %q or %q", *mode, netpolicy.None, netpolicy.Proxied)
}

// validateAsk checks network.ask and network.ask_timeout.
func validateAsk(file string, n *Network) (bool, time.Duration, error) {
	on := n.Ask != nil && *n.Ask
	d := asks.DefaultTimeout
	if n.AskTimeout != nil {
		v, err := time.ParseDuration(*n.AskTimeout)
		if err != nil || v < time.Second || v > MaxAskTimeout {
			return false, 0, fieldError(file, "network.ask_timeout", "%q: want a duration from 1s to %v, e.g. \"30s\"", *n.AskTimeout, MaxAskTimeout)
		}
		d = v
	}
	return on, d, nil
}

// validatePolicy builds the policy of the user's rules followed by the
// presets' rules. policy.New makes the checks that span a rule's fields
// (a tcp rule's ports, a deny rule's websocket); its errors are mapped
// back to the user's rule or the preset they came from.
func validatePolicy(file string, n *Network) (*policy.Policy, error) {
	rules, err := validateRules(file, n.Rules)
	if err != nil {
		return nil, err
	}
	nUser := len(rules)
	pr, presetOf, err := presetRules(file, n.Presets)
	if err != nil {
		return nil, err
	}
	rules = append(rules, pr...)
	pol, err := policy.New(rules)
	if err == nil {
		return pol, nil
	}
	var re *policy.RuleError
	if errors.As(err, &re) && re.Index >= nUser {
		return nil, fieldError(file, "network.presets", "preset %q: %s: %v", presetOf[re.Index-nUser], re.Field, re.Err)
	}
	if errors.As(err, &re) {
		return nil, &FieldError{File: file, Field: fmt.Sprintf("network.rules[%d].%s", re.Index, re.Field), Err: re.Err}
	}
	return nil, &FieldError{File: file, Field: "network.rules", Err: err}
}

// presetRules loads and checks the named presets' rules, in order, and
// returns with them the preset name of each rule.
func presetRules(file string, names []string) (rules []policy.Rule, presetOf []string, err error) {
	for i, name := range names {
		field := fmt.Sprintf("network.presets[%d]", i)
		if slices.Contains(names[:i], name) {
			return nil, nil, fieldError(file, field, "%q is named twice", name)
		}
		p, err := LoadPreset(name)
		if err != nil {
			return nil, nil, fieldError(file, field, "%w", err)
		}
		pr, err := validateRules("preset "+name, p.Rules)
		if err != nil {
			return nil, nil, fieldError(file, field, "%w", err)
		}
		rules = append(rules, pr...)
		for range pr {
			presetOf = append(presetOf, name)
		}
	}
	return rules, presetOf, nil
}

// validateDNS checks [network.dns]; nil means the defaults (the system
// resolver, the DefaultSinkhole answer).
func validateDNS(file string, d *DNS) (DNSConfig, error) {
	out := DNSConfig{Sinkhole: DefaultSinkhole}
	if d == nil {
		return out, nil
	}
	switch {
	case d.Block == nil || *d.Block == BlockSinkhole:
	case *d.Block == BlockNXDomain:
		out.Sinkhole = netip.Addr{}
	default:
		return out, fieldError(file, "network.dns.block", "%q: want %q or %q", *d.Block, BlockSinkhole, BlockNXDomain)
	}
	if d.Sinkhole != nil {
		a, err := netip.ParseAddr(*d.Sinkhole)
		if err != nil || !a.Is4() || a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() {
			return out, fieldError(file, "network.dns.sinkhole", "%q is not a unicast, non-loopback IPv4 address", *d.Sinkhole)
		}
		// Checked, but unused when the block answer is NXDOMAIN.
		if out.Sinkhole.IsValid() {
			out.Sinkhole = a
		}
	}
	for i, u := range d.Upstream {
		hp, err := normUpstream(u)
		if err != nil {
			return out, fieldError(file, fmt.Sprintf("network.dns.upstream[%d]", i), "%q: %v", u, err)
		}
		out.Upstreams = append(out.Upstreams, hp)
	}
	var err error
	out.Overrides, err = dnsOverrides(file, d.Overrides)
	return out, err
}

// dnsOverrides checks [network.dns.overrides], keyed by normalised name
// (nil when there are none).
func dnsOverrides(file string, in map[string][]string) (map[string][]netip.Addr, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := map[string][]netip.Addr{}
	for _, name := range sortedKeys(in) {
		h, err := policy.NormalizeHost(name)
		if err != nil || h.IsIP() {
			return nil, fieldError(file, "network.dns.overrides", "key %q is not a host name", name)
		}
		if len(in[name]) == 0 {
			return nil, fieldError(file, fmt.Sprintf("network.dns.overrides.%q", name), "needs at least one address")
		}
		for i, a := range in[name] {
			addr, err := netip.ParseAddr(a)
			if err != nil || addr.Zone() != "" {
				return nil, fieldError(file, fmt.Sprintf("network.dns.overrides.%q[%d]", name, i), "%q is not an IP address", a)
			}
			out[h.Name] = append(out[h.Name], addr.Unmap())
		}
	}
	return out, nil
}

// validateSecrets checks every [secrets.NAME], in name order.
func validateSecrets(file string, in map[string]*Secret) ([]secrets.Spec, error) {
	var out []secrets.Spec
	for _, name := range sortedKeys(in) {
		sp, err := validateSecret(file, name, in[name])
		if err != nil {
			return nil, err
		}
		out = append(out, sp)
	}
	if err := checkAWSKey(file, out); err != nil {
		return nil, err
	}
	return out, nil
}

// validateSecret checks [secrets.NAME]: its name, its one source, the
// hosts it may be sent to and where it is injected.
func validateSecret(file, name string, sec *Secret) (secrets.Spec, error) {
	field := "secrets." + name
	if !secrets.ValidName(name) {
		return secrets.Spec{}, fieldError(file, field, "secret names must be environment variable names ([A-Za-z_][A-Za-z0-9_]*)")
	}
	if sec == nil {
		return secrets.Spec{}, fieldError(file, field, "empty")
	}
	src, err := secretSource(file, field, sec)
	if err != nil {
		return secrets.Spec{}, err
	}
	if len(sec.Hosts) == 0 {
		return secrets.Spec{}, fieldError(file, field+".hosts", "a secret must name the hosts it may be sent to")
	}
	sp := secrets.Spec{Name: name, Source: src, ConfigFile: file}
	if sec.AllowPlaintext != nil {
		sp.AllowPlaintext = *sec.AllowPlaintext
	}
	if sec.AllowForeignCredentials != nil {
		sp.AllowForeignCredentials = *sec.AllowForeignCredentials
	}
	for i, h := range sec.Hosts {
		p, err := policy.ParseHostPattern(h)
		if err != nil {
			return secrets.Spec{}, fieldError(file, fmt.Sprintf("%s.hosts[%d]", field, i), "%v", err)
		}
		if p.IsAny() {
			return secrets.Spec{}, fieldError(file, fmt.Sprintf("%s.hosts[%d]", field, i), "\"*\" would send the secret anywhere")
		}
		sp.Hosts = append(sp.Hosts, p)
	}
	if sec.AWS != nil {
		return awsSecret(file, field, sec, sp)
	}
	for i, in := range sec.Inject {
		pl, err := secrets.ParsePlace(in)
		if err != nil {
			return secrets.Spec{}, fieldError(file, fmt.Sprintf("%s.inject[%d]", field, i), "%v", err)
		}
		sp.Inject |= pl
	}
	if sp.Inject == 0 {
		sp.Inject = secrets.Header
	}
	return sp, nil
}

// awsSecret checks a secret that is part of an AWS access key: it is
// only ever used to sign, so it names no place to be injected and is
// never sent unencrypted.
func awsSecret(file, field string, sec *Secret, sp secrets.Spec) (secrets.Spec, error) {
	part, err := secrets.ParseAWSPart(*sec.AWS)
	if err != nil {
		return secrets.Spec{}, fieldError(file, field+".aws", "%v", err)
	}
	if len(sec.Inject) > 0 {
		return secrets.Spec{}, fieldError(file, field+".inject", "a part of an AWS access key is never substituted as text (the gateway re-signs requests with it): remove inject")
	}
	if sp.AllowPlaintext {
		return secrets.Spec{}, fieldError(file, field+".allow_plaintext", "requests signed with an AWS access key are re-signed only over TLS: remove allow_plaintext")
	}
	sp.AWS = part
	return sp, nil
}

// checkAWSKey checks that the [secrets] parts of an AWS access key make
// one key: one access key ID, one secret access key, at most one session
// token, all bound to the same hosts.
func checkAWSKey(file string, specs []secrets.Spec) error {
	count := map[secrets.AWSPart][]string{}
	var hosts string
	var first string
	for _, sp := range specs {
		if sp.AWS == secrets.AWSNone {
			continue
		}
		count[sp.AWS] = append(count[sp.AWS], sp.Name)
		h := fmt.Sprint(sp.Hosts)
		if first == "" {
			first, hosts = sp.Name, h
		} else if h != hosts {
			return fieldError(file, "secrets."+sp.Name+".hosts", "the parts of an AWS access key must be bound to the same hosts (secrets.%s has %s)", first, hosts)
		}
	}
	if first == "" {
		return nil
	}
	for _, part := range []secrets.AWSPart{secrets.AWSKeyID, secrets.AWSSecretKey, secrets.AWSSessionToken} {
		names := count[part]
		switch {
		case len(names) > 1:
			return fieldError(file, "secrets."+names[1]+".aws", "secrets.%s is the %s already: one AWS access key per config", names[0], part)
		case len(names) == 0 && part != secrets.AWSSessionToken:
			return fieldError(file, "secrets."+first+".aws", "an AWS access key needs a secret with aws = %q too", part.String())
		}
	}
	return nil
}

// secretSource checks that exactly one of value, env and file is set, and
// that it is well formed.
func secretSource(file, field string, sec *Secret) (secrets.Source, error) {
	var src secrets.Source
	n := 0
	if sec.Value != nil {
		n++
		src.Value = *sec.Value
		if src.Value == "" {
			return src, fieldError(file, field+".value", "empty")
		}
	}
	if sec.Env != nil {
		n++
		src.Env = *sec.Env
		if !secrets.ValidName(src.Env) {
			return src, fieldError(file, field+".env", "%q is not an environment variable name", src.Env)
		}
	}
	if sec.File != nil {
		n++
		src.File = *sec.File
		if !strings.HasPrefix(src.File, "/") {
			return src, fieldError(file, field+".file", "%q must be an absolute path", src.File)
		}
	}
	if n != 1 {
		return src, fieldError(file, field, "set exactly one of value, env or file (found %d)", n)
	}
	return src, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func normUpstream(u string) (string, error) {
	if a, err := netip.ParseAddr(u); err == nil {
		return netip.AddrPortFrom(a, 53).String(), nil
	}
	ap, err := netip.ParseAddrPort(u)
	if err != nil {
		return "", errors.New("want an IP address or ip:port (names cannot be resolved before DNS exists)")
	}
	if ap.Port() == 0 {
		return "", errors.New("port 0")
	}
	return ap.String(), nil
}

var validMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}

// validateRules checks [[network.rules]] (file names them in errors) and
// converts them to policy rules. The checks that span a rule's fields are
// policy.New's.
func validateRules(file string, in []Rule) ([]policy.Rule, error) {
	var out []policy.Rule
	for i, r := range in {
		pr, err := validateRule(file, i, r)
		if err != nil {
			return nil, err
		}
		out = append(out, pr)
	}
	return out, nil
}

// validateRule checks the fields of network.rules[i] one by one.
func validateRule(file string, i int, r Rule) (policy.Rule, error) {
	fe := func(f string, format string, args ...any) error {
		return fieldError(file, fmt.Sprintf("network.rules[%d].%s", i, f), format, args...)
	}
	pr := policy.Rule{Action: policy.Allow, Proto: policy.ProtoHTTP}
	if r.Name != nil {
		pr.Name = *r.Name
	}
	if r.Action != nil {
		switch *r.Action {
		case "allow":
		case "deny":
			pr.Action = policy.Deny
		default:
			return pr, fe("action", "%q: want \"allow\" or \"deny\"", *r.Action)
		}
	}
	if r.Protocol != nil {
		p, err := policy.ParseProto(*r.Protocol)
		if err != nil {
			return pr, fe("protocol", "%v", err)
		}
		if p == policy.ProtoUDP {
			return pr, fe("protocol", "udp is not relayed by the gateway yet (DNS is served by the gateway's resolver)")
		}
		pr.Proto = p
	}
	var err error
	if pr.Hosts, err = ruleHosts(r.Hosts, fe); err != nil {
		return pr, err
	}
	if pr.CIDRs, err = ruleCIDRs(r.CIDRs, fe); err != nil {
		return pr, err
	}
	for j, m := range r.Methods {
		up := strings.ToUpper(m)
		if !slices.Contains(validMethods, up) {
			return pr, fe(fmt.Sprintf("methods[%d]", j), "%q is not an HTTP method (%s)", m, strings.Join(validMethods, ", "))
		}
		pr.Methods = append(pr.Methods, up)
	}
	for j, p := range r.Ports {
		if p < 1 || p > 65535 {
			return pr, fe(fmt.Sprintf("ports[%d]", j), "%d is not a port (1-65535)", p)
		}
		pr.Ports = append(pr.Ports, uint16(p))
	}
	for j, p := range r.Paths {
		pp, err := policy.ParsePathPattern(p)
		if err != nil {
			return pr, fe(fmt.Sprintf("paths[%d]", j), "%v", err)
		}
		pr.Paths = append(pr.Paths, pp)
	}
	if r.WebSocket != nil {
		pr.WebSocket = *r.WebSocket
	}
	if r.AllowForeignCredentials != nil {
		pr.AllowForeignCredentials = *r.AllowForeignCredentials
	}
	return pr, nil
}

// keyError makes the FieldError of a key below a fixed prefix (one rule,
// [gateway]).
type keyError func(key, format string, args ...any) error

// ruleHosts checks a rule's host patterns; the error says where an IP
// address or a port belongs instead.
func ruleHosts(hosts []string, fe keyError) ([]policy.HostPattern, error) {
	var out []policy.HostPattern
	for j, h := range hosts {
		hp, err := policy.ParseHostPattern(h)
		if err != nil {
			if hh, herr := policy.NormalizeHost(h); herr == nil && hh.IsIP() {
				return nil, fe(fmt.Sprintf("hosts[%d]", j), "%q is an IP address: put it in cidrs", h)
			}
			if strings.Contains(h, ":") {
				return nil, fe(fmt.Sprintf("hosts[%d]", j), "%q: put ports in ports, not in hosts", h)
			}
			return nil, fe(fmt.Sprintf("hosts[%d]", j), "%v", err)
		}
		out = append(out, hp)
	}
	return out, nil
}

// ruleCIDRs checks a rule's CIDRs; a bare address is a one-address prefix.
func ruleCIDRs(cidrs []string, fe keyError) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for j, c := range cidrs {
		var p netip.Prefix
		var err error
		if strings.Contains(c, "/") {
			p, err = netip.ParsePrefix(c)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(c)
			if err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || p.Addr().Zone() != "" {
			return nil, fe(fmt.Sprintf("cidrs[%d]", j), "%q is not a CIDR or IP address", c)
		}
		if p.Masked() != p {
			return nil, fe(fmt.Sprintf("cidrs[%d]", j), "%q has host bits set (did you mean %s?)", c, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// validateGateway checks [gateway]; nil, and every key unset, mean the
// defaults.
func validateGateway(file string, g *Gateway) (GatewayConfig, error) {
	out := GatewayConfig{
		Listen:            DefaultListen,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		DialTimeout:       DefaultDialTimeout,
		TLSHandshake:      DefaultTLSHandshake,
		ResponseHeader:    DefaultResponseHeaderTimeout,
	}
	if g == nil {
		return out, nil
	}
	fe := func(f string, format string, args ...any) error {
		return fieldError(file, "gateway."+f, format, args...)
	}
	if err := gatewayPlaces(g, &out, fe); err != nil {
		return out, err
	}
	if g.MaxHeaderBytes != nil {
		v := *g.MaxHeaderBytes
		if v < 4096 || v > MaxMaxHeaderBytes {
			return out, fe("max_header_bytes", "%d: want 4096..%d", v, MaxMaxHeaderBytes)
		}
		out.MaxHeaderBytes = int(v)
	}
	if g.Timeouts != nil {
		return out, gatewayTimeouts(g.Timeouts, &out, fe)
	}
	return out, nil
}

// gatewayPlaces checks the listen addresses (host:port; "" turns a
// listener off) and the absolute paths of [gateway] into out.
func gatewayPlaces(g *Gateway, out *GatewayConfig, fe keyError) error {
	for _, a := range []struct {
		name string
		v    *string
		dst  *string
		path bool // an absolute path, else a listen address
	}{
		{"listen", g.Listen, &out.Listen, false},
		{"transparent_listen", g.TransparentListen, &out.TransparentListen, false},
		{"dns_listen", g.DNSListen, &out.DNSListen, false},
		{"admin_socket", g.AdminSocket, &out.AdminSocket, true},
		{"receipts", g.Receipts, &out.Receipts, true},
	} {
		if a.v == nil {
			continue
		}
		if a.path && !strings.HasPrefix(*a.v, "/") {
			return fe(a.name, "%q must be an absolute path", *a.v)
		}
		if !a.path && *a.v != "" {
			if _, _, err := net.SplitHostPort(*a.v); err != nil {
				return fe(a.name, "%q is not host:port", *a.v)
			}
		}
		*a.dst = *a.v
	}
	for i, b := range g.ExtraCABundles {
		if !strings.HasPrefix(b, "/") {
			return fe(fmt.Sprintf("extra_ca_bundles[%d]", i), "%q must be an absolute path", b)
		}
		out.ExtraCABundles = append(out.ExtraCABundles, b)
	}
	return nil
}

// gatewayTimeouts checks [gateway.timeouts] into out: positive durations,
// and 0 (no limit) for response_header.
func gatewayTimeouts(t *Timeouts, out *GatewayConfig, fe keyError) error {
	for _, x := range []struct {
		name string
		v    *string
		dst  *time.Duration
		zero bool
	}{
		{"read_header", t.ReadHeader, &out.ReadHeaderTimeout, false},
		{"idle", t.Idle, &out.IdleTimeout, false},
		{"dial", t.Dial, &out.DialTimeout, false},
		{"tls_handshake", t.TLSHandshake, &out.TLSHandshake, false},
		{"response_header", t.ResponseHeader, &out.ResponseHeader, true},
	} {
		if x.v == nil {
			continue
		}
		d, err := time.ParseDuration(*x.v)
		if err != nil || d < 0 || (d == 0 && !x.zero) {
			return fe("timeouts."+x.name, "%q is not a positive duration (e.g. \"10s\")", *x.v)
		}
		*x.dst = d
	}
	return nil
}

// Decode strictly decodes TOML holding only the gateway's sections; unknown
// keys are errors naming the file, line and key.
func Decode(file string, data []byte) (*Sections, error) {
	var s Sections
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		var sme *toml.StrictMissingError
		if errors.As(err, &sme) && len(sme.Errors) > 0 {
			var msgs []string
			for _, e := range sme.Errors {
				row, _ := e.Position()
				msg := fmt.Sprintf("%s:%d: unknown key %s", file, row, strings.Join(e.Key(), "."))
				if k := e.Key(); len(k) > 0 {
					if s := suggest.Nearest(k[len(k)-1], suggest.TOMLKeys(reflect.TypeFor[Sections](), k)); s != "" {
						msg += "; did you mean " + s + "?"
					}
				}
				msgs = append(msgs, msg)
			}
			return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "; "))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, fmt.Errorf("%w: %s:%d: %s", ErrInvalid, file, row, de.Error())
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, file, err)
	}
	return &s, nil
}

// LoadFile reads, decodes and validates a standalone gateway config file.
func LoadFile(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("egressconfig: %w", err)
	}
	s, err := Decode(path, b)
	if err != nil {
		return nil, err
	}
	return Validate(path, s)
}
