package egressconfig

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
)

const example = `
[network]
policy = "proxied"

[[network.rules]]
name = "github api"
hosts = ["api.github.com", "*.githubusercontent.com"]
methods = ["get", "POST"]
ports = [443]
paths = ["/repos/", "/user"]

[[network.rules]]
name = "ssh"
protocol = "tcp"
hosts = ["github.com"]
ports = [22]

[[network.rules]]
action = "deny"
hosts = ["*"]
paths = ["/admin"]

[[network.rules]]
name = "lan"
cidrs = ["10.1.0.0/16", "192.168.1.5"]
websocket = true

[network.dns]
upstream = ["1.1.1.1", "[2606:4700:4700::1111]:53"]
[network.dns.overrides]
"Internal.Example." = ["10.1.2.3"]

[gateway]
listen = "0.0.0.0:3128"
transparent_listen = "0.0.0.0:3129"
dns_listen = "0.0.0.0:53"
extra_ca_bundles = ["/etc/corp/ca.pem"]
max_header_bytes = 32768
[gateway.timeouts]
read_header = "5s"
response_header = "0s"

[secrets.GITHUB_TOKEN]
env = "GH_TOKEN"
hosts = ["api.github.com", "github.com"]

[secrets.OPENAI_API_KEY]
value = "sk-inline-value-123"
hosts = ["api.openai.com"]
inject = ["header", "body"]
`

func TestLoadExample(t *testing.T) {
	t.Parallel()
	s, err := Decode("user.toml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Validate("user.toml", s)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeProxied || cfg.Policy.Len() != 4 {
		t.Fatalf("cfg %+v", cfg)
	}
	r := cfg.Policy.Rules()
	if r[0].Methods[0] != "GET" || r[1].Proto != policy.ProtoTCP || r[2].Action != policy.Deny || !r[3].WebSocket {
		t.Fatalf("rules %+v", r)
	}
	if r[3].CIDRs[1] != netip.MustParsePrefix("192.168.1.5/32") {
		t.Fatalf("bare IP CIDR: %v", r[3].CIDRs)
	}
	if cfg.DNS.Upstreams[0] != "1.1.1.1:53" || cfg.DNS.Overrides["internal.example"][0] != netip.MustParseAddr("10.1.2.3") {
		t.Fatalf("dns %+v", cfg.DNS)
	}
	g := cfg.Gateway
	if g.Listen != "0.0.0.0:3128" || g.MaxHeaderBytes != 32768 || g.ReadHeaderTimeout != 5*time.Second || g.IdleTimeout != DefaultIdleTimeout || g.ResponseHeader != 0 {
		t.Fatalf("gateway %+v", g)
	}
	if len(cfg.Secrets) != 2 || cfg.Secrets[0].Name != "GITHUB_TOKEN" || cfg.Secrets[0].Inject != secrets.Header || cfg.Secrets[1].Inject != secrets.Header|secrets.Body {
		t.Fatalf("secrets %+v", cfg.Secrets)
	}
}

func TestErrorsNameFileAndField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		toml  string
		field string
	}{
		{"[network]\npolicy = \"open\"", "network.policy"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\n[[network.rules]]\nhosts = [\"ok.com\", \"bad*.com\"]", "network.rules[1].hosts[1]"},
		{"[[network.rules]]\nhosts = [\"1.2.3.4\"]", "network.rules[0].hosts[0]"},
		{"[[network.rules]]\nhosts = [\"a.com:22\"]", "network.rules[0].hosts[0]"},
		{"[[network.rules]]\nhosts = [\"a\\u0000.com\"]", "network.rules[0].hosts[0]"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nports = [0]", "network.rules[0].ports[0]"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nmethods = [\"FETCH\"]", "network.rules[0].methods[0]"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\npaths = [\"/a/../b\"]", "network.rules[0].paths[0]"},
		{"[[network.rules]]\ncidrs = [\"10.0.0.1/8\"]", "network.rules[0].cidrs[0]"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\naction = \"permit\"", "network.rules[0].action"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nprotocol = \"tcp\"", "network.rules[0].ports"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nprotocol = \"udp\"\nports=[53]", "network.rules[0].protocol"},
		{"[[network.rules]]\nname = \"empty\"", "network.rules[0].hosts"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\naction = \"deny\"\nwebsocket = true", "network.rules[0].websocket"},
		{"[network.dns]\nupstream = [\"dns.google\"]", "network.dns.upstream[0]"},
		{"[network.dns]\nblock = \"refuse\"", "network.dns.block"},
		{"[network.dns]\nsinkhole = \"127.0.0.1\"", "network.dns.sinkhole"},
		{"[network.dns]\nsinkhole = \"::1\"", "network.dns.sinkhole"},
		{"[gateway]\nlisten = \"3128\"", "gateway.listen"},
		{"[gateway.timeouts]\nidle = \"forever\"", "gateway.timeouts.idle"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nenv = \"Y\"\nhosts = [\"a.com\"]", "secrets.X"},
		{"[secrets.X]\nvalue = \"v-12345678\"", "secrets.X.hosts"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"*\"]", "secrets.X.hosts[0]"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\ninject = [\"cookie\"]", "secrets.X.inject[0]"},
		{"[secrets.\"BAD-NAME\"]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]", "secrets.BAD-NAME"},
	}
	for _, tc := range tests {
		s, err := Decode("cfg.toml", []byte(tc.toml))
		if err != nil {
			t.Fatalf("%q: decode: %v", tc.toml, err)
		}
		_, err = Validate("cfg.toml", s)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.File != "cfg.toml" || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: err = %v, want field %s", tc.toml, err, tc.field)
		}
	}
}

func TestDecodeUnknownKey(t *testing.T) {
	t.Parallel()
	_, err := Decode("cfg.toml", []byte("[network]\npolicy = \"none\"\n\n[[network.rules]]\nhost = \"a.com\"\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cfg.toml:5") || !strings.Contains(err.Error(), "network.rules.host; did you mean hosts?") {
		t.Fatalf("err = %v", err)
	}
	// Only a close key is suggested.
	_, err = Decode("cfg.toml", []byte("[gateway]\nxyzzy = 1\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "unknown key gateway.xyzzy") || strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("err = %v", err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := Validate("x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeNone || cfg.Policy.Len() != 0 || cfg.Gateway.Listen != DefaultListen {
		t.Fatalf("%+v", cfg)
	}
	if d := cfg.Policy.Decide(policy.Request{Proto: policy.ProtoHTTP, Host: policy.Host{Name: "a.com"}, Port: 443}); d.Allow {
		t.Fatal("empty policy allowed a request")
	}
}

// The block answer: sinkhole by default, nxdomain by choice, another
// sinkhole address by choice.
func TestDNSBlockAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		toml string
		want string
	}{
		{"", DefaultSinkhole.String()},
		{"[network.dns]\nblock = \"sinkhole\"", DefaultSinkhole.String()},
		{"[network.dns]\nblock = \"nxdomain\"", "invalid IP"},
		{"[network.dns]\nsinkhole = \"198.18.7.7\"", "198.18.7.7"},
	} {
		s, err := Decode("cfg.toml", []byte(tc.toml))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := Validate("cfg.toml", s)
		if err != nil {
			t.Fatalf("%q: %v", tc.toml, err)
		}
		if got := cfg.DNS.Sinkhole.String(); got != tc.want {
			t.Errorf("%q: sinkhole %s, want %s", tc.toml, got, tc.want)
		}
	}
}

func TestOptOutKeys(t *testing.T) {
	doc := `
[[network.rules]]
hosts = ["api.test"]
allow_foreign_credentials = true

[[network.rules]]
hosts = ["other.test"]

[secrets.A]
value = "value-12345678"
hosts = ["api.test"]
allow_plaintext = true
allow_foreign_credentials = true

[secrets.B]
value = "value-87654321"
hosts = ["api.test"]
`
	s, err := Decode("c.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Validate("c.toml", s)
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Secrets[0], cfg.Secrets[1]
	if !a.AllowPlaintext || !a.AllowForeignCredentials || b.AllowPlaintext || b.AllowForeignCredentials || a.ConfigFile != "c.toml" {
		t.Fatalf("secrets %+v %+v", a, b)
	}
	h, _ := policy.NormalizeHost("api.test")
	o, _ := policy.NormalizeHost("other.test")
	if d := cfg.Policy.Decide(policy.Request{Proto: policy.ProtoHTTP, Host: h, Port: 443, Method: "GET", Path: "/"}); !d.Allow || !d.AllowForeignCredentials {
		t.Fatalf("rule opt-out lost: %+v", d)
	}
	if d := cfg.Policy.Decide(policy.Request{Proto: policy.ProtoHTTP, Host: o, Port: 443, Method: "GET", Path: "/"}); !d.Allow || d.AllowForeignCredentials {
		t.Fatalf("default must not opt out: %+v", d)
	}
}
