package egressconfig

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
	"vak/internal/netpolicy"
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
	if cfg.Mode != netpolicy.Proxied || cfg.Policy.Len() != 4 {
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
		{"[network]\nask = true\nask_timeout = \"0s\"", "network.ask_timeout"},
		{"[network]\nask_timeout = \"11m\"", "network.ask_timeout"},
		{"[network]\nask_timeout = \"soon\"", "network.ask_timeout"},
		{"[gateway]\nlisten = \"3128\"", "gateway.listen"},
		{"[gateway.timeouts]\nidle = \"forever\"", "gateway.timeouts.idle"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nenv = \"Y\"\nhosts = [\"a.com\"]", "secrets.X"},
		{"[secrets.X]\nvalue = \"v-12345678\"", "secrets.X.hosts"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"*\"]", "secrets.X.hosts[0]"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\ninject = [\"cookie\"]", "secrets.X.inject[0]"},
		{"[secrets.\"BAD-NAME\"]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]", "secrets.BAD-NAME"},
		{"[logins.claude]\nprovider = \"claude\"", "logins.claude.provider"},
		{"[logins.claude]\nprovider = \"anthropic\"\napi_hosts = [\"a.com\"]", "logins.claude"},
		{"[logins.corp]\napi_hosts = [\"a.com\"]", "logins.corp"},
		{"[logins.corp]\ntoken_urls = [\"http://sso.a.com/token\"]\napi_hosts = [\"a.com\"]", "logins.corp.token_urls[0]"},
		{"[logins.corp]\ntoken_urls = [\"https://sso.a.com/token\"]\napi_hosts = [\"*\"]", "logins.corp.api_hosts[0]"},
		{"[logins.corp]\ntoken_urls = [\"https://sso.a.com/token\"]\napi_hosts = [\"a.com:443\"]", "logins.corp.api_hosts[0]"},
		{"[logins.Corp]\nprovider = \"github\"", "logins.Corp"},
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

func TestLogins(t *testing.T) {
	t.Parallel()
	s, err := Decode("cfg.toml", []byte(`
[logins.claude]
provider = "anthropic"
[logins.corp]
token_urls = ["https://sso.corp.example/oauth2/token"]
api_hosts = ["api.corp.example", "*.corp.example"]
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Validate("cfg.toml", s)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Logins) != 2 || cfg.Logins[0].Name != "claude" || cfg.Logins[1].Name != "corp" {
		t.Fatalf("logins %+v", cfg.Logins)
	}
	claude, corp := cfg.Logins[0], cfg.Logins[1]
	if len(claude.Endpoints) < 2 || claude.APIHosts[0].String() != "api.anthropic.com" {
		t.Errorf("claude: %+v", claude)
	}
	if len(corp.Endpoints) != 1 || corp.Endpoints[0].Path != "/oauth2/token" || len(corp.APIHosts) != 2 {
		t.Errorf("corp: %+v", corp)
	}
}

// TestAWSKey: the parts of an AWS access key validate into secrets that
// are never injected as text and carry their part.
func TestAWSKey(t *testing.T) {
	t.Parallel()
	s, err := Decode("cfg.toml", []byte(`
[secrets.AWS_ACCESS_KEY_ID]
env = "AWS_ACCESS_KEY_ID"
hosts = ["*.amazonaws.com"]
aws = "access_key_id"
[secrets.AWS_SECRET_ACCESS_KEY]
env = "AWS_SECRET_ACCESS_KEY"
hosts = ["*.amazonaws.com"]
aws = "secret_access_key"
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Validate("cfg.toml", s)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Secrets) != 2 || cfg.Secrets[0].AWS != secrets.AWSKeyID || cfg.Secrets[1].AWS != secrets.AWSSecretKey ||
		cfg.Secrets[0].Inject != 0 || cfg.Secrets[1].Inject != 0 {
		t.Fatalf("secrets %+v", cfg.Secrets)
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
	if cfg.Mode != netpolicy.None || cfg.Policy.Len() != 0 || cfg.Gateway.Listen != DefaultListen {
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

// Every validation error, word for word: users (and tests elsewhere) rely on
// them naming the file, the key path and the value, and on the first error
// in file order (network, presets, DNS, gateway, secrets) being the one
// reported.
func TestErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		toml string
		want string
	}{
		{"[network]\npolicy = \"open\"",
			"cfg.toml: network.policy: \"open\": want \"none\" or \"proxied\""},
		{"[network]\npresets = [\"github\", \"github\"]",
			"cfg.toml: network.presets[1]: \"github\" is named twice"},
		{"[network]\npresets = [\"nosuch\"]",
			"cfg.toml: network.presets[0]: unknown preset \"nosuch\" (built in: anthropic, debian, github, go-modules, npm, openai, pypi, vscode)"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nprotocol = \"tcp\"",
			"cfg.toml: network.rules[0].ports: tcp rules must name their ports explicitly"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\naction = \"permit\"",
			"cfg.toml: network.rules[0].action: \"permit\": want \"allow\" or \"deny\""},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nprotocol = \"smtp\"",
			"cfg.toml: network.rules[0].protocol: unknown protocol \"smtp\" (want http, tcp or udp)"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nprotocol = \"udp\"\nports = [53]",
			"cfg.toml: network.rules[0].protocol: udp is not relayed by the gateway yet (DNS is served by the gateway's resolver)"},
		{"[[network.rules]]\nhosts = [\"1.2.3.4\"]",
			"cfg.toml: network.rules[0].hosts[0]: \"1.2.3.4\" is an IP address: put it in cidrs"},
		{"[[network.rules]]\nhosts = [\"a.com:22\"]",
			"cfg.toml: network.rules[0].hosts[0]: \"a.com:22\": put ports in ports, not in hosts"},
		{"[[network.rules]]\nhosts = [\"bad*.com\"]",
			"cfg.toml: network.rules[0].hosts[0]: malformed host: \"bad*.com\": '*' is allowed only as the whole leftmost label (\"*.example.com\")"},
		{"[[network.rules]]\ncidrs = [\"ten\"]",
			"cfg.toml: network.rules[0].cidrs[0]: \"ten\" is not a CIDR or IP address"},
		{"[[network.rules]]\ncidrs = [\"10.0.0.1/8\"]",
			"cfg.toml: network.rules[0].cidrs[0]: \"10.0.0.1/8\" has host bits set (did you mean 10.0.0.0/8?)"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nmethods = [\"FETCH\"]",
			"cfg.toml: network.rules[0].methods[0]: \"FETCH\" is not an HTTP method (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE, CONNECT)"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nports = [70000]",
			"cfg.toml: network.rules[0].ports[0]: 70000 is not a port (1-65535)"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\npaths = [\"/a/../b\"]",
			"cfg.toml: network.rules[0].paths[0]: malformed path: \"/a/../b\": dot segment"},
		{"[[network.rules]]\nname = \"empty\"",
			"cfg.toml: network.rules[0].hosts: a rule must name at least one host or CIDR"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\naction = \"deny\"\nwebsocket = true",
			"cfg.toml: network.rules[0].websocket: websocket is only meaningful on allow rules"},
		{"[[network.rules]]\nhosts = [\"*\"]\nprotocol = \"tcp\"\nports = [22]",
			"cfg.toml: network.rules[0].hosts[0]: tcp rules must name hosts, not \"*\""},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nprotocol = \"tcp\"\nports = [22]\npaths = [\"/x\"]",
			"cfg.toml: network.rules[0].paths: paths apply to http rules only, not tcp"},
		{"[network.dns]\nblock = \"refuse\"",
			"cfg.toml: network.dns.block: \"refuse\": want \"sinkhole\" or \"nxdomain\""},
		{"[network.dns]\nsinkhole = \"127.0.0.1\"",
			"cfg.toml: network.dns.sinkhole: \"127.0.0.1\" is not a unicast, non-loopback IPv4 address"},
		{"[network.dns]\nupstream = [\"dns.google\"]",
			"cfg.toml: network.dns.upstream[0]: \"dns.google\": want an IP address or ip:port (names cannot be resolved before DNS exists)"},
		{"[network.dns]\nupstream = [\"1.1.1.1:0\"]",
			"cfg.toml: network.dns.upstream[0]: \"1.1.1.1:0\": port 0"},
		{"[network.dns.overrides]\n\"1.2.3.4\" = [\"10.0.0.1\"]",
			"cfg.toml: network.dns.overrides: key \"1.2.3.4\" is not a host name"},
		{"[network.dns.overrides]\n\"a.com\" = []",
			"cfg.toml: network.dns.overrides.\"a.com\": needs at least one address"},
		{"[network.dns.overrides]\n\"a.com\" = [\"10.0.0.1\", \"ten\"]",
			"cfg.toml: network.dns.overrides.\"a.com\"[1]: \"ten\" is not an IP address"},
		{"[gateway]\nlisten = \"3128\"",
			"cfg.toml: gateway.listen: \"3128\" is not host:port"},
		{"[gateway]\ntransparent_listen = \"x\"",
			"cfg.toml: gateway.transparent_listen: \"x\" is not host:port"},
		{"[gateway]\ndns_listen = \"y\"",
			"cfg.toml: gateway.dns_listen: \"y\" is not host:port"},
		{"[gateway]\nadmin_socket = \"admin.sock\"",
			"cfg.toml: gateway.admin_socket: \"admin.sock\" must be an absolute path"},
		{"[gateway]\nreceipts = \"r.jsonl\"",
			"cfg.toml: gateway.receipts: \"r.jsonl\" must be an absolute path"},
		{"[gateway]\nextra_ca_bundles = [\"/ok.pem\", \"ca.pem\"]",
			"cfg.toml: gateway.extra_ca_bundles[1]: \"ca.pem\" must be an absolute path"},
		{"[gateway]\nmax_header_bytes = 100",
			"cfg.toml: gateway.max_header_bytes: 100: want 4096..1048576"},
		{"[gateway.timeouts]\nread_header = \"0s\"",
			"cfg.toml: gateway.timeouts.read_header: \"0s\" is not a positive duration (e.g. \"10s\")"},
		{"[gateway.timeouts]\nidle = \"forever\"",
			"cfg.toml: gateway.timeouts.idle: \"forever\" is not a positive duration (e.g. \"10s\")"},
		{"[gateway.timeouts]\ndial = \"-1s\"",
			"cfg.toml: gateway.timeouts.dial: \"-1s\" is not a positive duration (e.g. \"10s\")"},
		{"[gateway.timeouts]\ntls_handshake = \"1\"",
			"cfg.toml: gateway.timeouts.tls_handshake: \"1\" is not a positive duration (e.g. \"10s\")"},
		{"[gateway.timeouts]\nresponse_header = \"-1s\"",
			"cfg.toml: gateway.timeouts.response_header: \"-1s\" is not a positive duration (e.g. \"10s\")"},
		{"[secrets.\"BAD-NAME\"]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]",
			"cfg.toml: secrets.BAD-NAME: secret names must be environment variable names ([A-Za-z_][A-Za-z0-9_]*)"},
		{"[secrets.X]\nvalue = \"\"\nhosts = [\"a.com\"]",
			"cfg.toml: secrets.X.value: empty"},
		{"[secrets.X]\nenv = \"A-B\"\nhosts = [\"a.com\"]",
			"cfg.toml: secrets.X.env: \"A-B\" is not an environment variable name"},
		{"[secrets.X]\nfile = \"rel/path\"\nhosts = [\"a.com\"]",
			"cfg.toml: secrets.X.file: \"rel/path\" must be an absolute path"},
		{"[secrets.X]\nhosts = [\"a.com\"]",
			"cfg.toml: secrets.X: set exactly one of value, env or file (found 0)"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nenv = \"Y\"\nhosts = [\"a.com\"]",
			"cfg.toml: secrets.X: set exactly one of value, env or file (found 2)"},
		{"[secrets.X]\nvalue = \"v-12345678\"",
			"cfg.toml: secrets.X.hosts: a secret must name the hosts it may be sent to"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\", \"bad*.com\"]",
			"cfg.toml: secrets.X.hosts[1]: malformed host: \"bad*.com\": '*' is allowed only as the whole leftmost label (\"*.example.com\")"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"*\"]",
			"cfg.toml: secrets.X.hosts[0]: \"*\" would send the secret anywhere"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\ninject = [\"header\", \"cookie\"]",
			"cfg.toml: secrets.X.inject[1]: unknown injection place \"cookie\" (want header, query or body)"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\naws = \"secret\"",
			"cfg.toml: secrets.X.aws: \"secret\" is not a part of an AWS access key (want access_key_id, secret_access_key or session_token)"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\naws = \"access_key_id\"\ninject = [\"header\"]",
			"cfg.toml: secrets.X.inject: a part of an AWS access key is never substituted as text (the gateway re-signs requests with it): remove inject"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\naws = \"access_key_id\"\nallow_plaintext = true",
			"cfg.toml: secrets.X.allow_plaintext: requests signed with an AWS access key are re-signed only over TLS: remove allow_plaintext"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\naws = \"access_key_id\"",
			"cfg.toml: secrets.X.aws: an AWS access key needs a secret with aws = \"secret_access_key\" too"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\naws = \"access_key_id\"\n[secrets.Y]\nvalue = \"v-12345678\"\nhosts = [\"b.com\"]\naws = \"secret_access_key\"",
			"cfg.toml: secrets.Y.hosts: the parts of an AWS access key must be bound to the same hosts (secrets.X has [a.com])"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\naws = \"access_key_id\"\n[secrets.Y]\nvalue = \"v-12345678\"\nhosts = [\"a.com\"]\naws = \"access_key_id\"",
			"cfg.toml: secrets.Y.aws: secrets.X is the access_key_id already: one AWS access key per config"},
		{"[network]\npolicy = \"proxied\"\n[gateway]\nlisten = \"bad\"\n[secrets.X]\nvalue = \"\"",
			"cfg.toml: gateway.listen: \"bad\" is not host:port"},
		{"[network]\npolicy = \"open\"\n[[network.rules]]\nname = \"empty\"",
			"cfg.toml: network.policy: \"open\": want \"none\" or \"proxied\""},
		{"[[network.rules]]\nname = \"empty\"\n[network.dns]\nblock = \"refuse\"",
			"cfg.toml: network.rules[0].hosts: a rule must name at least one host or CIDR"},
		{"[network.dns]\nblock = \"refuse\"\n[gateway]\nlisten = \"3128\"",
			"cfg.toml: network.dns.block: \"refuse\": want \"sinkhole\" or \"nxdomain\""},
		{"[network.dns]\nblock = \"nxdomain\"\nsinkhole = \"127.0.0.1\"",
			"cfg.toml: network.dns.sinkhole: \"127.0.0.1\" is not a unicast, non-loopback IPv4 address"},
		{"[network]\npresets = [\"nosuch\"]\n[[network.rules]]\nhosts = [\"a.com\"]\nprotocol = \"tcp\"",
			"cfg.toml: network.presets[0]: unknown preset \"nosuch\" (built in: anthropic, debian, github, go-modules, npm, openai, pypi, vscode)"},
		{"[[network.rules]]\nhosts = [\"a.com\"]\nports = [0]\n[network]\npresets = [\"nosuch\"]",
			"cfg.toml: network.rules[0].ports[0]: 0 is not a port (1-65535)"},
		{"[secrets.B]\nvalue = \"\"\nhosts = [\"a.com\"]\n[secrets.A]\nenv = \"A-B\"\nhosts = [\"a.com\"]",
			"cfg.toml: secrets.A.env: \"A-B\" is not an environment variable name"},
		{"[secrets.X]\nvalue = \"v-12345678\"\nhosts = [\"bad*.com\"]\ninject = [\"cookie\"]",
			"cfg.toml: secrets.X.hosts[0]: malformed host: \"bad*.com\": '*' is allowed only as the whole leftmost label (\"*.example.com\")"},
	}
	for _, tc := range tests {
		s, err := Decode("cfg.toml", []byte(tc.toml))
		if err != nil {
			t.Fatalf("%q: decode: %v", tc.toml, err)
		}
		_, err = Validate("cfg.toml", s)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrInvalid) {
			t.Errorf("%q:\n got  %v\n want %s", tc.toml, err, tc.want)
		}
	}
	// A nil secret table cannot come from TOML, only from a caller.
	_, err := Validate("cfg.toml", &Sections{Secrets: map[string]*Secret{"X": nil}})
	if err == nil || err.Error() != "cfg.toml: secrets.X: empty" {
		t.Errorf("nil secret: %v", err)
	}
}

func TestAsk(t *testing.T) {
	for _, tc := range []struct {
		body string
		on   bool
		d    time.Duration
	}{
		{"", false, 30 * time.Second},
		{"[network]\nask = true", true, 30 * time.Second},
		{"[network]\nask = true\nask_timeout = \"2m\"", true, 2 * time.Minute},
	} {
		sec, err := Decode("c.toml", []byte(tc.body))
		var cfg *Config
		if err == nil {
			cfg, err = Validate("c.toml", sec)
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.body, err)
		}
		if cfg.Ask != tc.on || cfg.AskTimeout != tc.d {
			t.Errorf("%q: ask %v %v, want %v %v", tc.body, cfg.Ask, cfg.AskTimeout, tc.on, tc.d)
		}
	}
}
