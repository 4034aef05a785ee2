package secrets

import (
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
)

// TestRequestHeadOddPlaces tries a placeholder and a real value in every
// part of a request head that is never substituted: the method, header
// names (which net/http canonicalises, changing case), URL user
// information and trailers. Positive controls: the same request without
// the secret, and a real value toward its own host, pass.
func TestRequestHeadOddPlaces(t *testing.T) {
	t.Parallel()
	s := session(t)
	gh := s.Env()["GITHUB_TOKEN"]
	canon := http.CanonicalHeaderKey
	tests := []struct {
		name    string
		host    string
		method  string
		header  http.Header
		user    *url.Userinfo
		blocked bool
		real    bool
	}{
		{name: "control", host: "evil.test", method: "GET", header: http.Header{"X-Ok": {"1"}}},
		{name: "placeholder as method", host: "evil.test", method: gh, blocked: true},
		{name: "placeholder as method to bound host", host: "api.github.com", method: gh, blocked: true},
		{name: "upper-cased placeholder as method", host: "evil.test", method: strings.ToUpper(gh), blocked: true},
		{name: "real value as method", host: "evil.test", method: ghValue, blocked: true, real: true},
		{name: "real value as method to bound host", host: "api.github.com", method: ghValue},
		{name: "placeholder in header name", host: "evil.test", method: "GET", header: http.Header{canon("X-" + gh): {"1"}}, blocked: true},
		{name: "placeholder in header name to bound host", host: "api.github.com", method: "GET", header: http.Header{canon("X-" + gh): {"1"}}, blocked: true},
		{name: "real value in header name", host: "evil.test", method: "GET", header: http.Header{canon("X-" + ghValue): {"1"}}, blocked: true, real: true},
		{name: "lower-case real value in header name (HTTP/2)", host: "evil.test", method: "GET", header: http.Header{strings.ToLower("x-" + ghValue): {"1"}}, blocked: true, real: true},
		{name: "placeholder in URL user", host: "api.github.com", method: "GET", user: url.User(gh), blocked: true},
		{name: "placeholder in URL password", host: "api.github.com", method: "GET", user: url.UserPassword("x", gh), blocked: true},
		{name: "real value in URL password", host: "evil.test", method: "GET", user: url.UserPassword("x", ghValue), blocked: true, real: true},
		{name: "user without secret", host: "evil.test", method: "GET", user: url.UserPassword("x", "y")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{Method: tc.method, URL: &url.URL{Scheme: "https", Host: tc.host, Path: "/", User: tc.user}, Header: tc.header}
			if r.Header == nil {
				r.Header = http.Header{}
			}
			_, err := s.RewriteRequest(host(tc.host), r, true)
			checkBlocked(t, s, err, tc.blocked, tc.real)
		})
	}
	// Trailers: never substituted.
	for _, tc := range []struct {
		name    string
		host    string
		tr      http.Header
		blocked bool
		real    bool
	}{
		{"control", "evil.test", http.Header{"X-Checksum": {"abc"}}, false, false},
		{"placeholder in trailer value", "api.github.com", http.Header{"X-Checksum": {gh}}, true, false},
		{"placeholder in trailer name", "evil.test", http.Header{canon("X-" + gh): {"1"}}, true, false},
		{"real value in trailer", "evil.test", http.Header{"X-Checksum": {ghValue}}, true, true},
		{"real value in trailer to bound host", "api.github.com", http.Header{"X-Checksum": {ghValue}}, false, false},
	} {
		t.Run("trailer "+tc.name, func(t *testing.T) {
			checkBlocked(t, s, s.Trailer(host(tc.host), tc.tr), tc.blocked, tc.real)
		})
	}
}

func checkBlocked(t *testing.T, s *Session, err error, blocked, real bool) {
	t.Helper()
	if !blocked {
		if err != nil {
			t.Fatalf("blocked: %v", err)
		}
		return
	}
	var be *BlockedError
	if !errors.As(err, &be) {
		t.Fatalf("not blocked: %v", err)
	}
	if be.RealValue != real {
		t.Errorf("RealValue = %v, want %v", be.RealValue, real)
	}
	for _, bad := range []string{ghValue, aiValue, s.Env()["GITHUB_TOKEN"], s.Env()["AI_KEY"]} {
		if strings.Contains(strings.ToLower(err.Error()), strings.ToLower(bad)) {
			t.Fatalf("error reveals a secret: %v", err)
		}
	}
}

// TestNoInjectionOverPlaintext: a placeholder is substituted only into
// requests leaving over TLS, unless the secret allows plaintext.
func TestNoInjectionOverPlaintext(t *testing.T) {
	t.Parallel()
	plain := NewForTest("PLAIN_OK", "plain-ok-value-123", Header|Query|Body, "api.ai.test")
	plain.AllowPlaintext = true
	s := NewSession([]*Secret{
		NewForTest("AI_KEY", aiValue, Header|Query|Body, "api.ai.test"),
		plain,
	}, nil)
	ai, ok := s.Env()["AI_KEY"], s.Env()["PLAIN_OK"]
	for _, tc := range []struct {
		name    string
		tls     bool
		ph      string
		blocked bool
	}{
		{"tls", true, ai, false},
		{"plaintext", false, ai, true},
		{"plaintext allowed", false, ok, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, where := range []string{"header", "query", "body"} {
				r := &http.Request{Method: "POST", URL: &url.URL{Scheme: "http", Host: "api.ai.test", Path: "/"}, Header: http.Header{}}
				var err error
				switch where {
				case "header":
					r.Header.Set("Authorization", "Bearer "+tc.ph)
					_, err = s.RewriteRequest(host("api.ai.test"), r, tc.tls)
				case "query":
					r.URL.RawQuery = "k=" + tc.ph
					_, err = s.RewriteRequest(host("api.ai.test"), r, tc.tls)
				case "body":
					rd, _ := s.RequestBody(host("api.ai.test"), strings.NewReader("k="+tc.ph), tc.tls, nil)
					_, err = io.ReadAll(rd)
				}
				var be *BlockedError
				if tc.blocked != errors.As(err, &be) || (tc.blocked && !be.Plaintext) {
					t.Fatalf("%s: err = %v, want blocked=%v", where, err, tc.blocked)
				}
			}
		})
	}
	// Raw TCP streams are plaintext for this purpose.
	rd, stop := s.InteractiveRequest(host("api.ai.test"), strings.NewReader("AUTH "+ai+"\r\n"), false)
	defer stop()
	if _, err := io.ReadAll(rd); !errors.Is(err, ErrBlocked) {
		t.Fatalf("raw TCP plaintext injection: %v", err)
	}
}

// TestForeignCredential: toward a host with a bound header secret, a
// credential header must carry that placeholder.
func TestForeignCredential(t *testing.T) {
	t.Parallel()
	s := session(t)
	gh := s.Env()["GITHUB_TOKEN"]
	basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	for _, tc := range []struct {
		name    string
		host    string
		h       http.Header
		foreign string
	}{
		{"no credential", "api.github.com", http.Header{"Accept": {"*/*"}}, ""},
		{"own placeholder", "api.github.com", http.Header{"Authorization": {"Bearer " + gh}}, ""},
		{"own placeholder in basic", "api.github.com", http.Header{"Authorization": {basic("x-access-token", gh)}}, ""},
		{"foreign bearer", "api.github.com", http.Header{"Authorization": {"Bearer ghp_attackerKey000000000000"}}, "Authorization"},
		{"foreign basic", "api.github.com", http.Header{"Authorization": {basic("x", "attacker")}}, "Authorization"},
		{"foreign api key header", "raw.githubusercontent.com", http.Header{"X-Api-Key": {"attacker-key-123456"}}, "X-Api-Key"},
		{"own in one header, foreign in another", "api.github.com", http.Header{"Authorization": {"Bearer " + gh}, "X-Api-Key": {"attacker"}}, "X-Api-Key"},
		{"unbound host: not our business", "evil.test", http.Header{"Authorization": {"Bearer attacker"}}, ""},
		{"query/body secret only", "api.ai.test", http.Header{"Authorization": {"Bearer attacker"}}, "Authorization"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.ForeignCredential(host(tc.host), tc.h)
			var fe *ForeignCredentialError
			if tc.foreign == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &fe) || fe.Header != tc.foreign || !errors.Is(err, ErrBlocked) {
				t.Fatalf("err = %v, want foreign credential in %s", err, tc.foreign)
			}
			if strings.Contains(err.Error(), "attacker") {
				t.Fatalf("error echoes the credential: %v", err)
			}
		})
	}
	// The secret's opt-out.
	sec := NewForTest("GITHUB_TOKEN", ghValue, Header, "api.github.com")
	sec.AllowForeignCredentials = true
	s2 := NewSession([]*Secret{sec}, nil)
	if err := s2.ForeignCredential(host("api.github.com"), http.Header{"Authorization": {"Bearer other"}}); err != nil {
		t.Fatalf("allow_foreign_credentials ignored: %v", err)
	}
}

func TestCheckNameAndScrub(t *testing.T) {
	t.Parallel()
	s := session(t)
	gh := s.Env()["GITHUB_TOKEN"]
	for _, name := range []string{gh + ".evil.test", strings.ToLower(ghValue) + ".evil.test", "x." + strings.ToLower(aiValue), strings.ToLower(ghValue) + ".githubusercontent.com"} {
		err := s.CheckName(name)
		if !errors.Is(err, ErrBlocked) {
			t.Errorf("CheckName(%s) = %v", name, err)
		}
		if err != nil && (strings.Contains(strings.ToLower(err.Error()), strings.ToLower(ghValue)) || strings.Contains(strings.ToLower(err.Error()), strings.ToLower(aiValue)) || strings.Contains(err.Error(), gh)) {
			t.Errorf("CheckName error reveals the secret: %v", err)
		}
	}
	if err := s.CheckName("api.github.com"); err != nil {
		t.Errorf("control: %v", err)
	}
	for in, want := range map[string]string{
		"host " + strings.ToLower(ghValue) + ".evil.test": "host [secret:GITHUB_TOKEN].evil.test",
		strings.ToUpper(gh) + " /x":                       "[placeholder:GITHUB_TOKEN] /x",
		"a" + aiValue + "b" + aiValue:                     "a[secret:AI_KEY]b[secret:AI_KEY]",
		"nothing here":                                    "nothing here",
	} {
		if got := s.Scrub(in); got != want {
			t.Errorf("Scrub(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactHeaderNames(t *testing.T) {
	t.Parallel()
	s := session(t)
	h := http.Header{http.CanonicalHeaderKey("X-" + ghValue): {"1"}, "X-Plain": {"2"}}
	s.RedactHeader(h)
	for k := range h {
		if strings.Contains(strings.ToLower(k), strings.ToLower(ghValue)) {
			t.Fatalf("header name not redacted: %v", h)
		}
	}
	if h.Get("X-Plain") != "2" || len(h) != 2 {
		t.Fatalf("headers: %v", h)
	}
}

// TestInteractiveCheckKeepsLength: the WebSocket scanner passes bytes
// unchanged and never substitutes, even toward a bound host.
func TestInteractiveCheckKeepsLength(t *testing.T) {
	t.Parallel()
	s := session(t)
	ai := s.Env()["AI_KEY"]
	rd, stop := s.InteractiveCheck(host("api.ai.test"), iotest.OneByteReader(strings.NewReader("hello "+aiValue+" world")), "WebSocket frame")
	got, err := io.ReadAll(rd)
	stop()
	if err != nil || string(got) != "hello "+aiValue+" world" {
		t.Fatalf("bound real value: %q %v", got, err)
	}
	rd, stop = s.InteractiveCheck(host("api.ai.test"), iotest.OneByteReader(strings.NewReader("hello "+ai)), "WebSocket frame")
	got, err = io.ReadAll(rd)
	stop()
	if !errors.Is(err, ErrBlocked) || strings.Contains(string(got), ai[:len(ai)-1]) {
		t.Fatalf("placeholder: %q %v", got, err)
	}
}

// TestEncodedFormsRedactedAndBlocked: base64 (both alphabets, every
// alignment inside a longer string), hex and percent-encoding of a value
// are redacted from responses and refused toward unbound hosts. Controls:
// the encodings of an unrelated string pass untouched.
func TestEncodedFormsRedactedAndBlocked(t *testing.T) {
	t.Parallel()
	val := "sk-test+/value?&=0123456789~ab"
	s := NewSession([]*Secret{NewForTest("K", val, Header, "api.test")}, nil)
	ph := s.Env()["K"]
	var forms []string
	for k := range 3 {
		prefix := strings.Repeat("P", k)
		forms = append(forms,
			base64.StdEncoding.EncodeToString([]byte(prefix+val+"suffix")),
			base64.URLEncoding.EncodeToString([]byte(prefix+val)),
			base64.RawStdEncoding.EncodeToString([]byte(prefix+val)))
	}
	forms = append(forms, hexString(val), strings.ToUpper(hexString(val)), url.QueryEscape(val), url.PathEscape(val))
	for _, f := range forms {
		body := `{"echo":"` + f + `"}`
		got, err := io.ReadAll(s.RedactReader(iotest.OneByteReader(strings.NewReader(body))))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) == body || !strings.Contains(string(got), ph) {
			t.Errorf("encoded form %q not redacted: %s", f, got)
		}
		rd, _ := s.RequestBody(host("evil.test"), strings.NewReader(body), true, nil)
		if _, err := io.ReadAll(rd); !errors.Is(err, ErrBlocked) {
			t.Errorf("encoded form %q sent to an unbound host: %v", f, err)
		}
	}
	other := "completely-unrelated-text-42"
	for _, f := range []string{base64.StdEncoding.EncodeToString([]byte(other)), hexString(other)} {
		got, _ := io.ReadAll(s.RedactReader(strings.NewReader(f)))
		if string(got) != f {
			t.Errorf("control %q changed: %q", f, got)
		}
	}
}

func hexString(s string) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteByte(digits[s[i]>>4])
		b.WriteByte(digits[s[i]&15])
	}
	return b.String()
}
