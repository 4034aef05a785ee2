package gateway

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/egress/egressconfig"
	"vak/internal/egress/egresstest"
	"vak/internal/egress/logins"
)

// oauthMock is a provider's token endpoint and API on one TLS server: the
// code exchange issues access and refresh tokens, a refresh with the
// current refresh token rotates both, the API echoes the credential it got.
type oauthMock struct {
	mu      sync.Mutex
	gen     int
	seen    []string // what reached the mock: "host path credential"
	invalid int
	gzipped bool
}

func (m *oauthMock) tokens(gen int) (access, refresh string) {
	return fmt.Sprintf("sk-ant-oat01-REAL%02d-%s", gen, strings.Repeat("a", 40)), fmt.Sprintf("sk-ant-ort01-REAL%02d-%s", gen, strings.Repeat("r", 40))
}

func (m *oauthMock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	host := strings.Split(r.Host, ":")[0]
	if host == "platform.claude.com" && r.Method == "POST" {
		var req map[string]string
		json.NewDecoder(r.Body).Decode(&req)
		m.seen = append(m.seen, host+" token "+req["refresh_token"])
		switch {
		case req["grant_type"] == "authorization_code" && req["code"] == "the-code":
		case req["grant_type"] == "refresh_token":
			if _, cur := m.tokens(m.gen); req["refresh_token"] != cur {
				m.invalid++
				w.WriteHeader(400)
				io.WriteString(w, `{"error":"invalid_grant"}`)
				return
			}
		default:
			w.WriteHeader(400)
			return
		}
		m.gen++
		a, rt := m.tokens(m.gen)
		w.Header().Set("Content-Type", "application/json")
		body := fmt.Sprintf(`{"token_type":"Bearer","access_token":%q,"refresh_token":%q,"expires_in":28800}`, a, rt)
		if m.gen == 1 && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			// The first answer gzip-encoded and chunked, flushed in the
			// middle of a token: the rewrite sees the decoded whole.
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			half := strings.Index(body, a) + len(a)/2
			io.WriteString(zw, body[:half])
			zw.Flush()
			w.(http.Flusher).Flush()
			io.WriteString(zw, body[half:])
			zw.Close()
			m.gzipped = true
			return
		}
		io.WriteString(w, body)
		return
	}
	m.seen = append(m.seen, host+" api "+r.Header.Get("Authorization"))
	fmt.Fprintf(w, "auth=%s", r.Header.Get("Authorization"))
}

func (m *oauthMock) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

func (m *oauthMock) refused() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.invalid
}

func (m *oauthMock) last() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seen) == 0 {
		return ""
	}
	return m.seen[len(m.seen)-1]
}

// TestLoginPhantomTokens: a login through the gateway leaves only
// phantoms on the client's side; the access phantom becomes the real
// token only toward the API host, the refresh phantom only in the body to
// the token endpoint; a phantom toward another allowed host, or a real
// token toward one, is refused; the tokens survive a gateway restart and
// never reach the receipts.
func TestLoginPhantomTokens(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	upCA := egresstest.NewCA(t)
	mock := &oauthMock{}
	up := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.2", 0), upCA, mock, "platform.claude.com", "api.anthropic.com", "other.test")
	cfgPath := filepath.Join(dir, "gateway.toml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`
[network]
policy = "proxied"
[[network.rules]]
name = "all"
hosts = ["platform.claude.com", "api.anthropic.com", "other.test"]
cidrs = ["127.0.0.2/32"]
ports = [%d]
[network.dns.overrides]
"platform.claude.com" = ["127.0.0.2"]
"api.anthropic.com" = ["127.0.0.2"]
"other.test" = ["127.0.0.2"]
[gateway]
listen = "127.0.0.1:0"
extra_ca_bundles = [%q]
[logins.claude]
provider = "anthropic"
`, up.Port(), upCA.WritePEM(t, dir))), 0o600)

	start := func() (*http.Client, func()) {
		g, err := New(Options{Load: func() (*egressconfig.Config, error) { return egressconfig.LoadFile(cfgPath) },
			ConfigFile: cfgPath, StateDir: state, Session: "logins", AdminSocket: "-", Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(g.CACert())
		pu, _ := url.Parse("http://" + g.Addrs().Proxy)
		tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}, func() {
			tr.CloseIdleConnections()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	c, stop := start()
	base := func(host string) string { return fmt.Sprintf("https://%s:%d", host, up.Port()) }
	do := func(method, u, auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tokenResp := func(body string) (access, refresh string) {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("token response %q: %v", body, err)
		}
		access, _ = m["access_token"].(string)
		refresh, _ = m["refresh_token"].(string)
		if strings.Contains(body, "REAL") || !strings.HasPrefix(access, "sk-ant-oat01-") || !strings.HasPrefix(refresh, "sk-ant-ort01-") {
			t.Fatalf("the client got real tokens or tokens of another shape: %s", body)
		}
		return access, refresh
	}

	// The login: the code exchange's response carries only phantoms.
	status, body := do("POST", base("platform.claude.com")+"/v1/oauth/token", "", `{"grant_type":"authorization_code","code":"the-code"}`)
	if status != 200 {
		t.Fatalf("code exchange: %d %s", status, body)
	}
	a1, r1 := tokenResp(body)
	realA1, realR1 := mock.tokens(1)
	mock.mu.Lock()
	gzipped := mock.gzipped
	mock.mu.Unlock()
	if !gzipped {
		t.Error("the code exchange's answer was not gzip-encoded (the gateway did not ask for gzip?)")
	}

	// The access phantom reaches the API as the real token; the echo comes
	// back as the phantom.
	status, body = do("GET", base("api.anthropic.com")+"/v1/messages", "Bearer "+a1, "")
	if status != 200 || mock.last() != "api.anthropic.com api Bearer "+realA1 || body != "auth=Bearer "+a1 {
		t.Fatalf("API request: %d %q, upstream saw %q", status, body, mock.last())
	}
	// Toward another allowed host the phantom is refused, and so is the
	// real token (a sandbox that got hold of it cannot carry it out).
	n := mock.count()
	for _, auth := range []string{"Bearer " + a1, "Bearer " + realA1} {
		if status, body = do("GET", base("other.test")+"/x", auth, ""); status != 403 {
			t.Errorf("%.20s... toward other.test: %d %s", auth, status, body)
		}
	}
	// The refresh phantom in the token request's body becomes the real
	// refresh token; the rotated tokens come back as new phantoms.
	status, body = do("POST", base("platform.claude.com")+"/v1/oauth/token", "", `{"grant_type":"refresh_token","refresh_token":"`+r1+`"}`)
	if status != 200 || mock.last() != "platform.claude.com token "+realR1 {
		t.Fatalf("refresh: %d %s, upstream saw %q", status, body, mock.last())
	}
	a2, r2 := tokenResp(body)
	if a2 == a1 || r2 == r1 {
		t.Fatal("a rotated token kept its phantom")
	}
	// The same endpoint written another way is rewritten all the same.
	status, body = do("POST", base("platform.claude.com")+"/V1/OAuth/token/", "", `{"grant_type":"refresh_token","refresh_token":"`+r2+`"}`)
	if status != 200 {
		t.Fatalf("refresh through /V1/OAuth/token/: %d %s", status, body)
	}
	a3, _ := tokenResp(body)
	if mock.count() < n || mock.refused() != 0 {
		t.Fatalf("the mock refused %d refreshes", mock.refused())
	}
	// A refresh the provider refuses (a revoked login): the client gets
	// the provider's answer, the receipt names the login.
	if status, body = do("POST", base("platform.claude.com")+"/v1/oauth/token", "", `{"grant_type":"refresh_token","refresh_token":"`+r1+`"}`); status != 400 {
		t.Fatalf("a refresh with a rotated-out token: %d %s", status, body)
	}
	stop()
	var named bool
	filepath.Walk(filepath.Join(state, "receipts"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".jsonl") {
			data, _ := os.ReadFile(p)
			named = named || strings.Contains(string(data), "login claude: the provider refused the token request (400)")
		}
		return nil
	})
	if !named {
		t.Error("no receipt names the login whose refresh the provider refused")
	}

	// The store is the host's, 0600, and the receipts hold no token.
	if fi, err := os.Stat(filepath.Join(state, logins.StoreFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store: %v %v", fi, err)
	}
	filepath.Walk(filepath.Join(state, "receipts"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			data, _ := os.ReadFile(p)
			if strings.Contains(string(data), "REAL") {
				t.Errorf("receipts %s hold a real token", p)
			}
		}
		return nil
	})

	// After a restart with the same state the latest phantom still works.
	c, stop = start()
	defer stop()
	realA3, _ := mock.tokens(3)
	status, body = do("GET", base("api.anthropic.com")+"/v1/messages", "Bearer "+a3, "")
	if status != 200 || mock.last() != "api.anthropic.com api Bearer "+realA3 {
		t.Fatalf("after a restart: %d %q, upstream saw %q", status, body, mock.last())
	}
}

// TestGatewayMergesImportedLogins: a gateway with a store of its own takes
// in logins.ImportFile when it starts (the tokens become known to it), and
// refuses to start on one that does not parse, naming the file.
func TestGatewayMergesImportedLogins(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.toml")
	os.WriteFile(cfgPath, []byte("[network]\npolicy = \"proxied\"\n[[network.rules]]\nhosts = [\"api.anthropic.com\"]\n[gateway]\nlisten = \"127.0.0.1:0\"\n[logins.claude]\nprovider = \"anthropic\"\n"), 0o600)
	host, err := logins.OpenStore(filepath.Join(dir, "host", logins.StoreFile))
	if err != nil {
		t.Fatal(err)
	}
	real := "sk-ant-oat01-IMPORTED-" + strings.Repeat("x", 30)
	tok := logins.Token{Login: "claude", Field: "access_token", Phantom: logins.Phantom(real), Real: real}
	if err := host.Add(tok); err != nil {
		t.Fatal(err)
	}
	export, err := host.Export([]string{"claude"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, data, wantErr string
	}{
		{"export", string(export), ""},
		{"corrupt", `{"version":1,"tokens":[{"login":"claude"`, logins.ImportFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			os.MkdirAll(state, 0o700)
			os.WriteFile(filepath.Join(state, logins.ImportFile), []byte(tc.data), 0o600)
			g, err := New(Options{Load: func() (*egressconfig.Config, error) { return egressconfig.LoadFile(cfgPath) },
				ConfigFile: cfgPath, StateDir: state, Session: "import", AdminSocket: "-", Logf: t.Logf})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), real) {
					t.Fatalf("New = %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if got := g.logins.Known("claude", "access_token", real); got != tok.Phantom {
				t.Fatalf("the imported token is not in the gateway's store (Known = %q)", got)
			}
		})
	}
}
