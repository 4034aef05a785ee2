package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func hosts(ss ...string) []HostPattern {
	var out []HostPattern
	for _, s := range ss {
		out = append(out, MustHostPattern(s))
	}
	return out
}

func paths(ss ...string) []PathPattern {
	var out []PathPattern
	for _, s := range ss {
		p, err := ParsePathPattern(s)
		if err != nil {
			panic(err)
		}
		out = append(out, p)
	}
	return out
}

func cidrs(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func name(s string) Host {
	h, err := NormalizeHost(s)
	if err != nil {
		panic(err)
	}
	return h
}

func testPolicy(t *testing.T) *Policy {
	t.Helper()
	p, err := New([]Rule{
		/* 0 */ {Name: "no admin", Action: Deny, Proto: ProtoHTTP, Hosts: hosts("api.example.com"), Paths: paths("/admin")},
		/* 1 */ {Name: "api read", Action: Allow, Proto: ProtoHTTP, Hosts: hosts("api.example.com"), Methods: []string{"GET", "HEAD"}, Ports: []uint16{443}},
		/* 2 */ {Name: "api write", Action: Allow, Proto: ProtoHTTP, Hosts: hosts("api.example.com"), Methods: []string{"POST"}, Ports: []uint16{443}, Paths: paths("/v1/items/*")},
		/* 3 */ {Name: "cdn", Action: Allow, Proto: ProtoHTTP, Hosts: hosts("*.cdn.example.com")},
		/* 4 */ {Name: "ws", Action: Allow, Proto: ProtoHTTP, Hosts: hosts("ws.example.com"), WebSocket: true},
		/* 5 */ {Name: "plain ws host", Action: Allow, Proto: ProtoHTTP, Hosts: hosts("nows.example.com")},
		/* 6 */ {Name: "ssh", Action: Allow, Proto: ProtoTCP, Hosts: hosts("git.example.com"), Ports: []uint16{22}},
		/* 7 */ {Name: "lan", Action: Allow, Proto: ProtoHTTP, CIDRs: cidrs("10.1.0.0/16")},
		/* 8 */ {Name: "internal", Action: Allow, Proto: ProtoHTTP, Hosts: hosts("svc.internal.test"), CIDRs: cidrs("10.9.0.0/16")},
		/* 9 */ {Name: "everything public", Action: Allow, Proto: ProtoHTTP, CIDRs: cidrs("0.0.0.0/0"), Ports: []uint16{8443}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecide(t *testing.T) {
	t.Parallel()
	p := testPolicy(t)
	http := func(host, method, path string, port uint16) Request {
		return Request{Proto: ProtoHTTP, Host: name(host), Port: port, Method: method, Path: path}
	}
	tests := []struct {
		name  string
		req   Request
		allow bool
		rule  int
	}{
		{"GET allowed", http("api.example.com", "GET", "/v1/items", 443), true, 1},
		{"mixed case trailing dot", http("API.Example.COM.", "GET", "/", 443), true, 1},
		{"admin denied first", http("api.example.com", "GET", "/admin/users", 443), false, 0},
		{"admin prefix is segment-bound", http("api.example.com", "GET", "/administrator", 443), true, 1},
		{"DELETE not listed", http("api.example.com", "DELETE", "/v1/items/1", 443), false, NoRule},
		{"POST on allowed path", http("api.example.com", "POST", "/v1/items/1", 443), true, 2},
		{"POST on other path", http("api.example.com", "POST", "/v1/users/1", 443), false, NoRule},
		{"wrong port", http("api.example.com", "GET", "/", 8080), false, NoRule},
		{"wildcard subdomain", http("img.cdn.example.com", "GET", "/a.png", 443), true, 3},
		{"wildcard any port", http("img.cdn.example.com", "GET", "/a.png", 8080), true, 3},
		{"wildcard not apex", http("cdn.example.com", "GET", "/", 443), false, NoRule},
		{"lookalike suffix", http("api.example.com.evil.com", "GET", "/", 443), false, NoRule},
		{"unknown host", http("evil.com", "GET", "/", 443), false, NoRule},
		{"ws allowed", Request{Proto: ProtoHTTP, Host: name("ws.example.com"), Port: 443, Method: "GET", Path: "/socket", WebSocket: true}, true, 4},
		{"ws not on plain rule", Request{Proto: ProtoHTTP, Host: name("nows.example.com"), Port: 443, Method: "GET", Path: "/socket", WebSocket: true}, false, NoRule},
		{"plain GET on ws-less host", http("nows.example.com", "GET", "/", 443), true, 5},
		{"ssh allowed", Request{Proto: ProtoTCP, Host: name("git.example.com"), Port: 22}, true, 6},
		{"ssh other port", Request{Proto: ProtoTCP, Host: name("git.example.com"), Port: 2222}, false, NoRule},
		{"raw tcp to http host", Request{Proto: ProtoTCP, Host: name("api.example.com"), Port: 443}, false, NoRule},
		{"http to tcp-only host", http("git.example.com", "GET", "/", 22), false, NoRule},
		{"udp always denied", Request{Proto: ProtoUDP, Host: name("api.example.com"), Port: 443}, false, NoRule},
		{"IP in CIDR", Request{Proto: ProtoHTTP, Host: Host{Addr: netip.MustParseAddr("10.1.2.3")}, Port: 80, Method: "GET", Path: "/"}, true, 7},
		{"IP outside CIDR", Request{Proto: ProtoHTTP, Host: Host{Addr: netip.MustParseAddr("10.2.2.3")}, Port: 80, Method: "GET", Path: "/"}, false, NoRule},
		{"host pattern never matches IP", Request{Proto: ProtoHTTP, Host: Host{Addr: netip.MustParseAddr("93.184.216.34")}, Port: 443, Method: "GET", Path: "/"}, false, NoRule},
		{"/0 covers public IP", Request{Proto: ProtoHTTP, Host: Host{Addr: netip.MustParseAddr("93.184.216.34")}, Port: 8443, Method: "GET", Path: "/"}, true, 9},
		{"/0 does not cover metadata", Request{Proto: ProtoHTTP, Host: Host{Addr: policyMetadata()}, Port: 8443, Method: "GET", Path: "/"}, false, NoRule},
		{"/0 does not cover loopback", Request{Proto: ProtoHTTP, Host: Host{Addr: netip.MustParseAddr("127.0.0.1")}, Port: 8443, Method: "GET", Path: "/"}, false, NoRule},
		{"no name", Request{Proto: ProtoHTTP, Port: 443, Method: "GET", Path: "/"}, false, NoRule},
	}
	for _, tc := range tests {
		d := p.Decide(tc.req)
		if d.Allow != tc.allow || d.Rule != tc.rule {
			t.Errorf("%s: Decide = %+v, want allow=%v rule=%d", tc.name, d, tc.allow, tc.rule)
		}
		if d.Reason == "" {
			t.Errorf("%s: empty reason", tc.name)
		}
	}
	var nilPolicy *Policy
	if d := nilPolicy.Decide(http("api.example.com", "GET", "/", 443)); d.Allow {
		t.Errorf("nil policy allowed: %+v", d)
	}
}

func policyMetadata() netip.Addr { return MetadataAddr }

func TestMayAllowAndAllowsName(t *testing.T) {
	t.Parallel()
	p := testPolicy(t)
	may := func(proto Proto, host string, port uint16) bool {
		return p.MayAllow(Request{Proto: proto, Host: name(host), Port: port}).Allow
	}
	if !may(ProtoHTTP, "api.example.com", 443) {
		t.Error("api.example.com:443 should be possible (deny rule 0 has a path condition)")
	}
	if may(ProtoHTTP, "api.example.com", 8080) {
		t.Error("api.example.com:8080 should be impossible")
	}
	if may(ProtoHTTP, "evil.com", 443) || may(ProtoTCP, "api.example.com", 443) {
		t.Error("unlisted destination should be impossible")
	}
	if !may(ProtoTCP, "git.example.com", 22) {
		t.Error("ssh should be possible")
	}
	blocked, err := New([]Rule{
		{Action: Deny, Proto: ProtoHTTP, Hosts: hosts("x.example.com")},
		{Action: Allow, Proto: ProtoHTTP, Hosts: hosts("*.example.com")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if blocked.MayAllow(Request{Proto: ProtoHTTP, Host: name("x.example.com"), Port: 443}).Allow {
		t.Error("unconditional deny before allow must make the host impossible")
	}
	if blocked.AllowsName("x.example.com") || !blocked.AllowsName("y.example.com") {
		t.Error("AllowsName disagrees with the rules")
	}
	for _, n := range []string{"api.example.com", "a.cdn.example.com", "git.example.com", "svc.internal.test"} {
		if !p.AllowsName(n) {
			t.Errorf("AllowsName(%q) = false", n)
		}
	}
	for _, n := range []string{"cdn.example.com", "evil.com", ""} {
		if p.AllowsName(n) {
			t.Errorf("AllowsName(%q) = true", n)
		}
	}
}

func TestAddrPermitted(t *testing.T) {
	t.Parallel()
	p := testPolicy(t)
	a := netip.MustParseAddr
	tests := []struct {
		name string
		port uint16
		addr string
		ok   bool
	}{
		{"api.example.com", 443, "93.184.216.34", true},
		{"api.example.com", 443, "127.0.0.1", false},
		{"api.example.com", 443, "169.254.169.254", false},
		{"api.example.com", 443, "100.64.1.1", false},
		{"api.example.com", 443, "::ffff:93.184.216.34", false},
		{"api.example.com", 443, "::1", false},
		{"svc.internal.test", 443, "10.9.1.1", true},
		{"svc.internal.test", 443, "10.8.1.1", false},
		{"svc.internal.test", 0, "10.9.1.1", true},
		{"", 80, "10.1.0.5", true},
		{"", 80, "10.2.0.5", false},
		{"", 8443, "8.8.8.8", true},
		{"", 8443, "127.0.0.1", false},
		{"", 80, "8.8.8.8", false},
	}
	for _, tc := range tests {
		if got := p.AddrPermitted(tc.name, tc.port, a(tc.addr)); got != tc.ok {
			t.Errorf("AddrPermitted(%q, %d, %s) = %v, want %v", tc.name, tc.port, tc.addr, got, tc.ok)
		}
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule  Rule
		field string
	}{
		{Rule{Action: Allow, Proto: ProtoHTTP}, "hosts"},
		{Rule{Proto: ProtoHTTP, Hosts: hosts("a.com")}, "action"},
		{Rule{Action: Allow, Hosts: hosts("a.com")}, "protocol"},
		{Rule{Action: Allow, Proto: ProtoTCP, Hosts: hosts("a.com")}, "ports"},
		{Rule{Action: Allow, Proto: ProtoTCP, Hosts: hosts("*"), Ports: []uint16{22}}, "hosts[0]"},
		{Rule{Action: Allow, Proto: ProtoTCP, Hosts: hosts("a.com"), Ports: []uint16{22}, Methods: []string{"GET"}}, "methods"},
		{Rule{Action: Allow, Proto: ProtoHTTP, Hosts: hosts("a.com"), Methods: []string{"get"}}, "methods[0]"},
		{Rule{Action: Deny, Proto: ProtoHTTP, Hosts: hosts("a.com"), WebSocket: true}, "websocket"},
	}
	for i, tc := range tests {
		_, err := New([]Rule{{Action: Allow, Proto: ProtoHTTP, Hosts: hosts("ok.com")}, tc.rule})
		var re *RuleError
		if !errors.As(err, &re) || re.Index != 1 || re.Field != tc.field || !errors.Is(err, ErrInvalidRule) {
			t.Errorf("case %d: err = %v, want RuleError at rules[1].%s", i, err, tc.field)
		}
	}
}

// FuzzHostGlob checks host normalisation and glob matching invariants on
// arbitrary input: normalisation is idempotent and case-insensitive; "*.x"
// never matches "x" and only matches at a label boundary; an exact pattern
// matches only its own name.
func FuzzHostGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"*.example.com", "www.example.com"},
		{"*.example.com", "example.com"},
		{"example.com", "EXAMPLE.com."},
		{"*", "a.b"},
		{"*.bücher.example", "x.xn--bcher-kva.example"},
		{"example.com", "example.com\x00.evil"},
		{"*.a", "%00.a"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pat, host string) {
		h, herr := NormalizeHost(host)
		if herr == nil && !h.IsIP() {
			h2, err := NormalizeHost(h.Name)
			if err != nil || h2 != h {
				t.Fatalf("normalisation not idempotent: %q -> %q -> %q, %v", host, h.Name, h2.Name, err)
			}
			h3, err := NormalizeHost(strings.ToUpper(h.Name) + ".")
			if err != nil || h3 != h {
				t.Fatalf("normalisation not case-insensitive: %q vs %q, %v", h.Name, h3.Name, err)
			}
			for i := 0; i < len(h.Name); i++ {
				c := h.Name[i]
				if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
					t.Fatalf("normalised name %q has byte %q", h.Name, c)
				}
			}
		}
		p, perr := ParseHostPattern(pat)
		if perr != nil || herr != nil || h.IsIP() {
			return
		}
		m := p.Match(h.Name)
		switch {
		case p.any:
			if !m {
				t.Fatalf("* did not match %q", h.Name)
			}
		case p.suffix != "":
			apex := p.suffix[1:]
			if p.Match(apex) {
				t.Fatalf("%q matched its apex %q", p, apex)
			}
			if m && !strings.HasSuffix(h.Name, p.suffix) {
				t.Fatalf("%q matched %q off a label boundary", p, h.Name)
			}
		default:
			if m != (h.Name == p.exact) {
				t.Fatalf("exact %q vs %q: match=%v", p, h.Name, m)
			}
		}
		if m2 := p.Match(strings.ToUpper(h.Name)); m2 && strings.ToUpper(h.Name) != h.Name && !p.any {
			t.Fatalf("Match accepted a non-normalised name %q", strings.ToUpper(h.Name))
		}
	})
}

// FuzzParseAuthority checks that CONNECT authorities either fail or yield a
// normalised host and a port that round-trip.
func FuzzParseAuthority(f *testing.F) {
	for _, s := range []string{"example.com:443", "[::1]:443", "1.2.3.4:22", "a.b:0", "x:99999", "a%00b:1", "[::1", "a:b:c", "ex\x00.com:443", "[fe80::1%25eth0]:443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, port, err := ParseAuthority(s, 0)
		if err != nil {
			return
		}
		if port == 0 {
			t.Fatalf("port 0 accepted from %q", s)
		}
		if h.IsIP() == (h.Name != "") {
			t.Fatalf("host %+v from %q must be exactly one of name or addr", h, s)
		}
		if h.IsIP() && (h.Addr.Zone() != "") {
			t.Fatalf("zoned addr from %q", s)
		}
		h2, p2, err := ParseAuthority(FormatAuthority(h, port), 0)
		if err != nil || h2 != h || p2 != port {
			t.Fatalf("round trip %q -> %q failed: %v %d %v", s, FormatAuthority(h, port), h2, p2, err)
		}
	})
}
