package sandcat

import (
	"errors"
	"strings"
	"testing"

	"vak/internal/egress/egressconfig"
	"vak/internal/egress/policy"
	"vak/internal/netpolicy"
)

const settings = `{
  "env": {"GIT_USER_NAME": "Your Name"},
  "secrets": {
    "ANTHROPIC_API_KEY": {"value": "sk-ant-real-key-here", "hosts": ["api.anthropic.com"]},
    "GITHUB_TOKEN": {"value": "ghp_your-real-token-here", "hosts": ["github.com", "*.githubusercontent.com", "api*.github.com"]},
    "SHORT": {"value": "abc", "hosts": ["x.com"]},
    "EVERYWHERE": {"value": "long-enough-value", "hosts": ["*"]}
  },
  "network": [
    {"action": "deny", "host": "evil.github.com"},
    {"action": "allow", "host": "*", "method": "get"},
    {"action": "allow", "host": "*.github.com", "method": "POST"},
    {"action": "allow", "host": "api?.example.com"},
    {"action": "allow", "host": "github.com", "comment": "x"}
  ],
  "extra": 1
}`

func TestConvert(t *testing.T) {
	res, err := Convert("settings.json", []byte(settings))
	if err != nil {
		t.Fatal(err)
	}
	s, err := egressconfig.Decode("out", res.TOML)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := egressconfig.Validate("out", s)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != netpolicy.Proxied || cfg.Policy.Len() != 4 {
		t.Fatalf("rules: %d\n%s", cfg.Policy.Len(), res.TOML)
	}
	req := func(host, method string) policy.Request {
		h, _ := policy.NormalizeHost(host)
		return policy.Request{Proto: policy.ProtoHTTP, Host: h, Port: 443, Method: method, Path: "/"}
	}
	for _, tc := range []struct {
		host, method string
		allow        bool
	}{
		{"evil.github.com", "GET", false},
		{"example.org", "GET", true},
		{"example.org", "POST", false},
		{"api.github.com", "POST", true},
		{"github.com", "PUT", true},
		{"api1.example.com", "PUT", false},
	} {
		if d := cfg.Policy.Decide(req(tc.host, tc.method)); d.Allow != tc.allow {
			t.Errorf("%s %s: %+v", tc.method, tc.host, d)
		}
	}
	if len(cfg.Secrets) != 2 || cfg.Secrets[1].Name != "GITHUB_TOKEN" || len(cfg.Secrets[1].Hosts) != 2 {
		t.Fatalf("secrets: %+v", cfg.Secrets)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"api?.example.com", "api*.github.com", "secrets.SHORT", "secrets.EVERYWHERE", "env.GIT_USER_NAME", `"comment"`, `"extra"`, "non-HTTP TCP", "headers only"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes do not mention %s:\n%s", want, notes)
		}
	}
}

func TestUnconvertibleDenyFails(t *testing.T) {
	for _, s := range []string{
		`{"network": [{"action": "deny", "host": "*evil*"}, {"action": "allow", "host": "*"}]}`,
		`{"network": [{"action": "deny", "host": "x.com", "method": "FETCH"}]}`,
		`{"network": [{"host": "x.com"}]}`,
	} {
		if _, err := Convert("s.json", []byte(s)); !errors.Is(err, ErrUnconvertible) {
			t.Errorf("%s: err = %v", s, err)
		}
	}
	if _, err := Convert("s.json", []byte("{not json")); err == nil {
		t.Error("bad JSON accepted")
	}
}
