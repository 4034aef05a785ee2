// Package policy decides whether the egress gateway lets a request leave the
// sandbox. It is pure: no I/O, no clocks, no globals that change. The gateway
// builds a Policy from validated configuration and asks Decide once per
// request (HTTP) or connection (other TCP); the answer names the rule that
// decided and why, for the receipt.
//
// Rules are ordered and the first matching rule wins; when none matches the
// request is denied. Destinations are names (normalised by NormalizeHost) or,
// only when the client gave no name, IP addresses matched against CIDRs.
// Names that resolve to non-public addresses are refused by the gateway unless
// AddrPermitted finds a rule that lists a CIDR for the address.
package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Proto is the kind of traffic a rule or request is about.
type Proto uint8

// Protocols. HTTP covers HTTP and HTTPS requests the gateway interprets
// (including WebSocket upgrades); TCP is any other stream, including TLS the
// gateway does not intercept; UDP is datagrams other than DNS, which the
// gateway's resolver answers itself.
const (
	ProtoHTTP Proto = iota + 1
	ProtoTCP
	ProtoUDP
)

// String is the config spelling of p.
func (p Proto) String() string {
	switch p {
	case ProtoHTTP:
		return "http"
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// ParseProto parses the config spelling ("http", "tcp", "udp").
func ParseProto(s string) (Proto, error) {
	switch s {
	case "http":
		return ProtoHTTP, nil
	case "tcp":
		return ProtoTCP, nil
	case "udp":
		return ProtoUDP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q (want http, tcp or udp)", s)
}

// Action is what a matching rule does.
type Action uint8

// Actions.
const (
	Allow Action = iota + 1
	Deny
)

// String is the config spelling of a.
func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Rule is one validated policy rule. The zero values of the optional fields
// mean "any": no Methods matches every method, no Ports every port, no Paths
// every path.
type Rule struct {
	Name   string
	Action Action
	Proto  Proto
	// Hosts match requests that carry a name; CIDRs match requests to an IP
	// literal and, for names, permit resolved non-public addresses.
	Hosts []HostPattern
	CIDRs []netip.Prefix
	// Methods are upper-case HTTP methods (HTTP rules only).
	Methods []string
	Ports   []uint16
	// Paths match the percent-decoded request path (HTTP rules only).
	Paths []PathPattern
	// WebSocket lets an allow rule match WebSocket upgrade requests; without
	// it upgrades are not matched by the rule.
	WebSocket bool
	// AllowForeignCredentials (allow rules) lets the requests the rule
	// allows carry credentials other than a bound secret's placeholder.
	AllowForeignCredentials bool
}

// Request is what the gateway knows about one request or connection.
type Request struct {
	Proto Proto
	// Host is the normalised name (Host.Name) or IP literal (Host.Addr).
	Host Host
	Port uint16
	// Method, Path and WebSocket are set for ProtoHTTP. Path is the
	// percent-decoded path, already checked by CanonicalPath.
	Method    string
	Path      string
	WebSocket bool
}

// Decision is the answer for one Request.
type Decision struct {
	Allow bool
	// Rule is the index of the deciding rule, or -1 when no rule matched.
	Rule int
	// RuleName is that rule's name ("" if unnamed or none).
	RuleName string
	// Reason is a human-readable explanation for logs and receipts.
	Reason string
	// AllowForeignCredentials is the allowing rule's opt-out of the
	// foreign-credential check.
	AllowForeignCredentials bool
}

// NoRule is Decision.Rule when no rule matched.
const NoRule = -1

// ErrInvalidRule is wrapped by every RuleError.
var ErrInvalidRule = errors.New("invalid rule")

// RuleError names the rule and field at fault.
type RuleError struct {
	Index int
	Field string
	Err   error
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("rules[%d].%s: %v", e.Index, e.Field, e.Err)
}

func (e *RuleError) Unwrap() []error { return []error{ErrInvalidRule, e.Err} }

// Policy is an immutable, validated rule list.
type Policy struct {
	rules []Rule
}

// New validates the cross-field constraints of rules and returns a Policy:
//   - every rule names at least one host or CIDR;
//   - TCP and UDP rules name their ports, and use no "*" host, methods,
//     paths or websocket (non-HTTP traffic must be allowed host:port by
//     host:port);
//   - websocket is only meaningful on allow rules for HTTP.
func New(rules []Rule) (*Policy, error) {
	rs := slices.Clone(rules)
	for i := range rs {
		r := &rs[i]
		if r.Action != Allow && r.Action != Deny {
			return nil, &RuleError{i, "action", errors.New("must be allow or deny")}
		}
		if r.Proto != ProtoHTTP && r.Proto != ProtoTCP && r.Proto != ProtoUDP {
			return nil, &RuleError{i, "protocol", errors.New("must be http, tcp or udp")}
		}
		if len(r.Hosts) == 0 && len(r.CIDRs) == 0 {
			return nil, &RuleError{i, "hosts", errors.New("a rule must name at least one host or CIDR")}
		}
		for j, m := range r.Methods {
			if m == "" || strings.ToUpper(m) != m {
				return nil, &RuleError{i, fmt.Sprintf("methods[%d]", j), fmt.Errorf("%q must be an upper-case method", m)}
			}
		}
		for j, p := range r.Ports {
			if p == 0 {
				return nil, &RuleError{i, fmt.Sprintf("ports[%d]", j), errors.New("port 0")}
			}
		}
		if r.Proto != ProtoHTTP {
			if len(r.Ports) == 0 {
				return nil, &RuleError{i, "ports", fmt.Errorf("%s rules must name their ports explicitly", r.Proto)}
			}
			for j, h := range r.Hosts {
				if h.IsAny() {
					return nil, &RuleError{i, fmt.Sprintf("hosts[%d]", j), fmt.Errorf("%s rules must name hosts, not \"*\"", r.Proto)}
				}
			}
			if len(r.Methods) > 0 {
				return nil, &RuleError{i, "methods", fmt.Errorf("methods apply to http rules only, not %s", r.Proto)}
			}
			if len(r.Paths) > 0 {
				return nil, &RuleError{i, "paths", fmt.Errorf("paths apply to http rules only, not %s", r.Proto)}
			}
			if r.WebSocket {
				return nil, &RuleError{i, "websocket", fmt.Errorf("websocket applies to http rules only, not %s", r.Proto)}
			}
		}
		if r.WebSocket && r.Action != Allow {
			return nil, &RuleError{i, "websocket", errors.New("websocket is only meaningful on allow rules")}
		}
	}
	return &Policy{rules: rs}, nil
}

// Rules returns a copy of the rules.
func (p *Policy) Rules() []Rule { return slices.Clone(p.rules) }

// Len is the number of rules.
func (p *Policy) Len() int { return len(p.rules) }

// matchDest reports whether the rule's hosts or CIDRs match the destination.
func (r *Rule) matchDest(h Host) bool {
	if h.IsIP() {
		for _, c := range r.CIDRs {
			if cidrContains(c, h.Addr) {
				return true
			}
		}
		return false
	}
	for _, hp := range r.Hosts {
		if hp.Match(h.Name) {
			return true
		}
	}
	return false
}

// cidrContains is Prefix.Contains, except that a zero-length prefix
// (0.0.0.0/0, ::/0) only covers public addresses: reaching a private address
// needs a CIDR that actually names it.
func cidrContains(c netip.Prefix, a netip.Addr) bool {
	if !c.Contains(a) {
		return false
	}
	return c.Bits() > 0 || IsPublic(a)
}

func (r *Rule) matchPort(port uint16) bool {
	return len(r.Ports) == 0 || slices.Contains(r.Ports, port)
}

func (r *Rule) hasRequestConditions() bool {
	return len(r.Methods) > 0 || len(r.Paths) > 0
}

func (r *Rule) matches(req *Request) bool {
	if r.Proto != req.Proto || !r.matchDest(req.Host) || !r.matchPort(req.Port) {
		return false
	}
	if req.Proto != ProtoHTTP {
		return true
	}
	if len(r.Methods) > 0 && !slices.Contains(r.Methods, req.Method) {
		return false
	}
	if len(r.Paths) > 0 {
		ok := false
		for _, pp := range r.Paths {
			if pp.Match(req.Path) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if req.WebSocket && r.Action == Allow && !r.WebSocket {
		return false
	}
	return true
}

func (p *Policy) describe(i int) string {
	// Per request: concatenation, not fmt.
	if n := p.rules[i].Name; n != "" {
		return "rule " + strconv.Itoa(i) + " (" + n + ")"
	}
	return "rule " + strconv.Itoa(i)
}

// Decide returns the decision of the first rule matching req, or a denial.
// A nil Policy denies everything.
func (p *Policy) Decide(req Request) Decision {
	if p == nil {
		return Decision{Rule: NoRule, Reason: "no policy loaded"}
	}
	if !req.Host.IsIP() && req.Host.Name == "" {
		return Decision{Rule: NoRule, Reason: "no destination name"}
	}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matches(&req) {
			continue
		}
		if r.Action == Allow {
			return Decision{Allow: true, Rule: i, RuleName: r.Name, Reason: p.describe(i) + " allows", AllowForeignCredentials: r.AllowForeignCredentials}
		}
		return Decision{Rule: i, RuleName: r.Name, Reason: p.describe(i) + " denies"}
	}
	return noMatch(&req)
}

func noMatch(req *Request) Decision {
	d := Decision{Rule: NoRule}
	switch {
	case req.Proto == ProtoTCP:
		d.Reason = "no rule allows this TCP destination (non-HTTP traffic needs a protocol = \"tcp\" rule naming host and port)"
	case req.Proto == ProtoUDP:
		d.Reason = "no rule allows this UDP destination"
	case req.Host.IsIP():
		d.Reason = "no rule matches this IP destination (IP destinations need a rule with cidrs)"
	case req.WebSocket:
		d.Reason = "no rule allows this WebSocket upgrade (allow rules need websocket = true)"
	default:
		d.Reason = "no rule matches"
	}
	return d
}

// MayAllow reports whether some request to req's destination (proto, host,
// port) could be allowed, ignoring method, path and WebSocket: it walks the
// rules in order and answers true at the first matching allow rule, false at
// the first matching deny rule that has no method or path condition. The
// gateway uses it before it knows the request (CONNECT, TLS ClientHello) and
// to find long-lived connections a new policy no longer permits at all.
func (p *Policy) MayAllow(req Request) Decision {
	if p == nil {
		return Decision{Rule: NoRule, Reason: "no policy loaded"}
	}
	for i := range p.rules {
		r := &p.rules[i]
		if r.Proto != req.Proto || !r.matchDest(req.Host) || !r.matchPort(req.Port) {
			continue
		}
		if r.Action == Allow {
			return Decision{Allow: true, Rule: i, RuleName: r.Name, Reason: p.describe(i) + " may allow"}
		}
		if !r.hasRequestConditions() {
			return Decision{Rule: i, RuleName: r.Name, Reason: p.describe(i) + " denies"}
		}
	}
	return noMatch(&req)
}

// AllowsName reports whether any traffic to the name could be allowed (any
// protocol, any port). The DNS server answers only such names.
func (p *Policy) AllowsName(name string) bool {
	if p == nil || name == "" {
		return false
	}
	h := Host{Name: name}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.matchDest(h) {
			continue
		}
		if r.Action == Allow {
			return true
		}
		if !r.hasRequestConditions() && len(r.Ports) == 0 {
			return false
		}
	}
	return false
}

// AddrPermitted reports whether the gateway may dial addr for traffic to the
// named host on port. Public addresses are always permitted (the name was
// already decided); a non-public address only when an allow rule matching
// the name (and port, if port is non-zero) lists a CIDR that contains it. For
// IP-literal destinations (name == "") the address itself must be covered by
// an allow rule's CIDR.
func (p *Policy) AddrPermitted(name string, port uint16, addr netip.Addr) bool {
	if p == nil || !addr.IsValid() {
		return false
	}
	if name == "" {
		for i := range p.rules {
			r := &p.rules[i]
			if r.Action != Allow || (port != 0 && !r.matchPort(port)) {
				continue
			}
			for _, c := range r.CIDRs {
				if cidrContains(c, addr) {
					return true
				}
			}
		}
		return false
	}
	if IsPublic(addr) {
		return true
	}
	h := Host{Name: name}
	for i := range p.rules {
		r := &p.rules[i]
		if r.Action != Allow || !r.matchDest(h) || (port != 0 && !r.matchPort(port)) {
			continue
		}
		for _, c := range r.CIDRs {
			if c.Bits() > 0 && c.Contains(addr) {
				return true
			}
		}
	}
	return false
}
