package proxy

import (
	"net/http/httptest"
	"strings"
	"testing"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
)

// decide is pure: the same request gets the same verdict, and a request
// refused before the policy is asked names no rule.
func TestDecide(t *testing.T) {
	t.Parallel()
	pol, err := policy.New([]policy.Rule{
		{Name: "api", Action: policy.Allow, Proto: policy.ProtoHTTP, Hosts: []policy.HostPattern{policy.MustHostPattern("api.test")}, Paths: []policy.PathPattern{mustPath(t, "/v1/")}, WebSocket: true},
		{Name: "server", Action: policy.Allow, Proto: policy.ProtoHTTP, Hosts: []policy.HostPattern{policy.MustHostPattern("opt.test")}, Methods: []string{"OPTIONS"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sess := secrets.NewSession([]*secrets.Secret{secrets.NewForTest("GH_TOKEN", ghValue, secrets.Header, "api.test")}, nil)
	ph := sess.Env()["GH_TOKEN"]
	tests := []struct {
		name, method, target, host string
		h2, ws                     bool
		status                     int    // 0: allowed
		rule                       int    // the receipt's rule
		msg                        string // in the client's answer
	}{
		{name: "allowed", method: "GET", target: "/v1/x", host: "api.test", rule: 0},
		{name: "WebSocket allowed", method: "GET", target: "/v1/x", host: "api.test", ws: true, rule: 0},
		{name: "asterisk", method: "OPTIONS", target: "*", host: "opt.test", rule: 1},
		{name: "path outside the rule", method: "GET", target: "/v2/x", host: "api.test", status: 403, rule: policy.NoRule, msg: "GET api.test:443: "},
		{name: "unknown host", method: "GET", target: "/", host: "other.test", status: 403, rule: policy.NoRule, msg: "(see the [network] rules of the user config)"},
		{name: "dot segment", method: "GET", target: "/v1/../admin", host: "api.test", status: 400, rule: policy.NoRule},
		{name: "placeholder in the name", method: "GET", target: "/v1/x", host: ph + ".evil.test", status: 403, rule: policy.NoRule, msg: "[placeholder:GH_TOKEN]"},
		{name: "WebSocket over HTTP/2", method: "GET", target: "/v1/x", host: "api.test", h2: true, ws: true, status: 400, rule: policy.NoRule, msg: "WebSocket over HTTP/2 is not supported"},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(tc.method, "https://"+tc.host+tc.target, nil)
		if tc.target == "*" {
			r.URL.Path = "*"
		}
		if tc.h2 {
			r.ProtoMajor = 2
		}
		h, err := policy.NormalizeHost(tc.host)
		if err != nil {
			t.Fatal(err)
		}
		tg := target{scheme: "https", host: h, port: 443}
		v := decide(pol, sess, r, tg, tc.ws)
		if again := decide(pol, sess, r, tg, tc.ws); again.d != v.d || (again.refused == nil) != (v.refused == nil) {
			t.Errorf("%s: not the same verdict twice: %+v, %+v", tc.name, v, again)
		}
		switch {
		case tc.status == 0 && (v.refused != nil || !v.d.Allow || v.d.Rule != tc.rule):
			t.Errorf("%s: %+v, want allowed by rule %d", tc.name, v, tc.rule)
		case tc.status != 0 && (v.refused == nil || v.refused.status != tc.status || v.d.Allow || v.d.Rule != tc.rule):
			t.Errorf("%s: %+v (%+v), want %d with rule %d", tc.name, v, v.refused, tc.status, tc.rule)
		case tc.status != 0:
			msg := v.refused.msg
			if msg == "" {
				msg = v.refused.reason
			}
			if !strings.Contains(msg, tc.msg) || strings.Contains(msg, ph) || v.refused.reason == "" {
				t.Errorf("%s: answer %q (reason %q), want it to contain %q", tc.name, msg, v.refused.reason, tc.msg)
			}
		}
	}
}

func mustPath(t *testing.T, s string) policy.PathPattern {
	t.Helper()
	p, err := policy.ParsePathPattern(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
