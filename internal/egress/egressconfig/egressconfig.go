// Package egressconfig defines the trusted configuration sections of the
// egress gateway — [network] (policy mode, ordered rules, DNS), [gateway]
// (listeners, CA bundles, timeouts, limits) and [secrets.NAME] — as TOML wire
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

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
	"vak/internal/suggest"
)

// Sections are the wire structs of the gateway's config sections.
type Sections struct {
	Network *Network           `toml:"network"`
	Gateway *Gateway           `toml:"gateway"`
	Secrets map[string]*Secret `toml:"secrets"`
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
}

// Network policy modes.
const (
	ModeNone    = "none"
	ModeProxied = "proxied"
)

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
	// Mode is ModeNone or ModeProxied.
	Mode   string
	Policy *policy.Policy
	DNS    DNSConfig
	// Gateway holds listener and limit settings; empty strings mean "use the
	// default" (the caller fills state-dir paths).
	Gateway GatewayConfig
	Secrets []secrets.Spec
}

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
// DefaultListen, no secrets.
func Validate(file string, s *Sections) (*Config, error) {
	if s == nil {
		s = &Sections{}
	}
	fe := func(field string, format string, args ...any) error {
		return &FieldError{File: file, Field: field, Err: fmt.Errorf(format, args...)}
	}
	cfg := &Config{Mode: ModeNone}
	net_ := s.Network
	if net_ == nil {
		net_ = &Network{}
	}
	if net_.Policy != nil {
		switch *net_.Policy {
		case ModeNone, ModeProxied:
			cfg.Mode = *net_.Policy
		default:
			return nil, fe("network.policy", "%q: want %q or %q", *net_.Policy, ModeNone, ModeProxied)
		}
	}
	rules, err := validateRules(file, net_.Rules)
	if err != nil {
		return nil, err
	}
	nUser := len(rules)
	var presetOf []string // preset name of each rule after the user's
	for i, name := range net_.Presets {
		if slices.Contains(net_.Presets[:i], name) {
			return nil, fe(fmt.Sprintf("network.presets[%d]", i), "%q is named twice", name)
		}
		p, err := LoadPreset(name)
		if err != nil {
			return nil, fe(fmt.Sprintf("network.presets[%d]", i), "%w", err)
		}
		pr, err := validateRules("preset "+name, p.Rules)
		if err != nil {
			return nil, fe(fmt.Sprintf("network.presets[%d]", i), "%w", err)
		}
		rules = append(rules, pr...)
		for range pr {
			presetOf = append(presetOf, name)
		}
	}
	pol, err := policy.New(rules)
	if err != nil {
		var re *policy.RuleError
		if errors.As(err, &re) && re.Index >= nUser {
			return nil, fe("network.presets", "preset %q: %s: %v", presetOf[re.Index-nUser], re.Field, re.Err)
		}
		if errors.As(err, &re) {
			return nil, &FieldError{File: file, Field: fmt.Sprintf("network.rules[%d].%s", re.Index, re.Field), Err: re.Err}
		}
		return nil, &FieldError{File: file, Field: "network.rules", Err: err}
	}
	cfg.Policy = pol

	cfg.DNS.Sinkhole = DefaultSinkhole
	if d := net_.DNS; d != nil {
		switch {
		case d.Block == nil || *d.Block == BlockSinkhole:
		case *d.Block == BlockNXDomain:
			cfg.DNS.Sinkhole = netip.Addr{}
		default:
			return nil, fe("network.dns.block", "%q: want %q or %q", *d.Block, BlockSinkhole, BlockNXDomain)
		}
		if d.Sinkhole != nil {
			a, err := netip.ParseAddr(*d.Sinkhole)
			if err != nil || !a.Is4() || a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() {
				return nil, fe("network.dns.sinkhole", "%q is not a unicast, non-loopback IPv4 address", *d.Sinkhole)
			}
			if cfg.DNS.Sinkhole.IsValid() {
				cfg.DNS.Sinkhole = a
			}
		}
		for i, u := range d.Upstream {
			hp, err := normUpstream(u)
			if err != nil {
				return nil, fe(fmt.Sprintf("network.dns.upstream[%d]", i), "%q: %v", u, err)
			}
			cfg.DNS.Upstreams = append(cfg.DNS.Upstreams, hp)
		}
		if len(d.Overrides) > 0 {
			cfg.DNS.Overrides = map[string][]netip.Addr{}
		}
		for _, name := range sortedKeys(d.Overrides) {
			h, err := policy.NormalizeHost(name)
			if err != nil || h.IsIP() {
				return nil, fe("network.dns.overrides", "key %q is not a host name", name)
			}
			if len(d.Overrides[name]) == 0 {
				return nil, fe(fmt.Sprintf("network.dns.overrides.%q", name), "needs at least one address")
			}
			for i, a := range d.Overrides[name] {
				addr, err := netip.ParseAddr(a)
				if err != nil || addr.Zone() != "" {
					return nil, fe(fmt.Sprintf("network.dns.overrides.%q[%d]", name, i), "%q is not an IP address", a)
				}
				cfg.DNS.Overrides[h.Name] = append(cfg.DNS.Overrides[h.Name], addr.Unmap())
			}
		}
	}

	gw, err := validateGateway(file, s.Gateway)
	if err != nil {
		return nil, err
	}
	cfg.Gateway = gw

	for _, name := range sortedKeys(s.Secrets) {
		sec := s.Secrets[name]
		field := "secrets." + name
		if !secrets.ValidName(name) {
			return nil, fe(field, "secret names must be environment variable names ([A-Za-z_][A-Za-z0-9_]*)")
		}
		if sec == nil {
			return nil, fe(field, "empty")
		}
		var src secrets.Source
		n := 0
		if sec.Value != nil {
			n++
			src.Value = *sec.Value
			if src.Value == "" {
				return nil, fe(field+".value", "empty")
			}
		}
		if sec.Env != nil {
			n++
			src.Env = *sec.Env
			if !secrets.ValidName(src.Env) {
				return nil, fe(field+".env", "%q is not an environment variable name", src.Env)
			}
		}
		if sec.File != nil {
			n++
			src.File = *sec.File
			if !strings.HasPrefix(src.File, "/") {
				return nil, fe(field+".file", "%q must be an absolute path", src.File)
			}
		}
		if n != 1 {
			return nil, fe(field, "set exactly one of value, env or file (found %d)", n)
		}
		if len(sec.Hosts) == 0 {
			return nil, fe(field+".hosts", "a secret must name the hosts it may be sent to")
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
				return nil, fe(fmt.Sprintf("%s.hosts[%d]", field, i), "%v", err)
			}
			if p.IsAny() {
				return nil, fe(fmt.Sprintf("%s.hosts[%d]", field, i), "\"*\" would send the secret anywhere")
			}
			sp.Hosts = append(sp.Hosts, p)
		}
		for i, in := range sec.Inject {
			pl, err := secrets.ParsePlace(in)
			if err != nil {
				return nil, fe(fmt.Sprintf("%s.inject[%d]", field, i), "%v", err)
			}
			sp.Inject |= pl
		}
		if sp.Inject == 0 {
			sp.Inject = secrets.Header
		}
		cfg.Secrets = append(cfg.Secrets, sp)
	}
	return cfg, nil
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

func validateRules(file string, in []Rule) ([]policy.Rule, error) {
	var out []policy.Rule
	for i, r := range in {
		field := func(f string) string { return fmt.Sprintf("network.rules[%d].%s", i, f) }
		fe := func(f string, format string, args ...any) error {
			return &FieldError{File: file, Field: field(f), Err: fmt.Errorf(format, args...)}
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
				return nil, fe("action", "%q: want \"allow\" or \"deny\"", *r.Action)
			}
		}
		if r.Protocol != nil {
			p, err := policy.ParseProto(*r.Protocol)
			if err != nil {
				return nil, fe("protocol", "%v", err)
			}
			if p == policy.ProtoUDP {
				return nil, fe("protocol", "udp is not relayed by the gateway yet (DNS is served by the gateway's resolver)")
			}
			pr.Proto = p
		}
		for j, h := range r.Hosts {
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
			pr.Hosts = append(pr.Hosts, hp)
		}
		for j, c := range r.CIDRs {
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
			pr.CIDRs = append(pr.CIDRs, p)
		}
		for j, m := range r.Methods {
			up := strings.ToUpper(m)
			if !slices.Contains(validMethods, up) {
				return nil, fe(fmt.Sprintf("methods[%d]", j), "%q is not an HTTP method (%s)", m, strings.Join(validMethods, ", "))
			}
			pr.Methods = append(pr.Methods, up)
		}
		for j, p := range r.Ports {
			if p < 1 || p > 65535 {
				return nil, fe(fmt.Sprintf("ports[%d]", j), "%d is not a port (1-65535)", p)
			}
			pr.Ports = append(pr.Ports, uint16(p))
		}
		for j, p := range r.Paths {
			pp, err := policy.ParsePathPattern(p)
			if err != nil {
				return nil, fe(fmt.Sprintf("paths[%d]", j), "%v", err)
			}
			pr.Paths = append(pr.Paths, pp)
		}
		if r.WebSocket != nil {
			pr.WebSocket = *r.WebSocket
		}
		if r.AllowForeignCredentials != nil {
			pr.AllowForeignCredentials = *r.AllowForeignCredentials
		}
		out = append(out, pr)
	}
	return out, nil
}

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
		return &FieldError{File: file, Field: "gateway." + f, Err: fmt.Errorf(format, args...)}
	}
	addr := func(f string, v *string, dst *string) error {
		if v == nil {
			return nil
		}
		if *v == "" {
			*dst = ""
			return nil
		}
		if _, _, err := net.SplitHostPort(*v); err != nil {
			return fe(f, "%q is not host:port", *v)
		}
		*dst = *v
		return nil
	}
	if err := addr("listen", g.Listen, &out.Listen); err != nil {
		return out, err
	}
	if err := addr("transparent_listen", g.TransparentListen, &out.TransparentListen); err != nil {
		return out, err
	}
	if err := addr("dns_listen", g.DNSListen, &out.DNSListen); err != nil {
		return out, err
	}
	if g.AdminSocket != nil {
		if !strings.HasPrefix(*g.AdminSocket, "/") {
			return out, fe("admin_socket", "%q must be an absolute path", *g.AdminSocket)
		}
		out.AdminSocket = *g.AdminSocket
	}
	if g.Receipts != nil {
		if !strings.HasPrefix(*g.Receipts, "/") {
			return out, fe("receipts", "%q must be an absolute path", *g.Receipts)
		}
		out.Receipts = *g.Receipts
	}
	for i, b := range g.ExtraCABundles {
		if !strings.HasPrefix(b, "/") {
			return out, fe(fmt.Sprintf("extra_ca_bundles[%d]", i), "%q must be an absolute path", b)
		}
		out.ExtraCABundles = append(out.ExtraCABundles, b)
	}
	if g.MaxHeaderBytes != nil {
		v := *g.MaxHeaderBytes
		if v < 4096 || v > MaxMaxHeaderBytes {
			return out, fe("max_header_bytes", "%d: want 4096..%d", v, MaxMaxHeaderBytes)
		}
		out.MaxHeaderBytes = int(v)
	}
	if t := g.Timeouts; t != nil {
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
				return out, fe("timeouts."+x.name, "%q is not a positive duration (e.g. \"10s\")", *x.v)
			}
			*x.dst = d
		}
	}
	return out, nil
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
