package cli

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/egress/egresstest"
	"vak/internal/testenv"
	"vak/internal/testenv/mockmodel"
)

// openaiAuthMock is OpenAI's token endpoint for "Sign in with ChatGPT":
// an authorization-code exchange issues generation 1, a refresh with the
// current real refresh token rotates to the next generation; tokens are
// JWTs as OpenAI's (the id token carries the ChatGPT account claims Codex
// reads). It records what reached it.
type openaiAuthMock struct {
	mu   sync.Mutex
	gen  int
	seen []string
}

func codexJWT(gen int, kind string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{
		"iss": "https://auth.openai.com", "aud": []string{"app_mock"}, "sub": "user-mock",
		"email": "dev@example.com", "exp": exp.Unix(), "iat": time.Now().Add(-time.Hour).Unix(),
		"https://api.openai.com/auth": map[string]any{
			"chatgpt_account_id": "acct-mock", "chatgpt_plan_type": "pro", "chatgpt_user_id": "user-mock", "user_id": "user-mock",
		},
		"https://api.openai.com/profile": map[string]any{"email": "dev@example.com", "email_verified": true},
		"kind":                           kind,
	})
	// The signature part holds the generation: REAL<gen>x, which the
	// sandbox-side grep looks for.
	return enc([]byte(`{"alg":"RS256","typ":"JWT","kid":"mock"}`)) + "." + enc(claims) + "." +
		fmt.Sprintf("REAL%02dx%s", gen, strings.Repeat("s", 80))
}

func (m *openaiAuthMock) tokens(gen int, exp time.Time) (id, access, refresh string) {
	return codexJWT(gen, "id", exp), codexJWT(gen, "access", exp), fmt.Sprintf("rt_REAL%02dx%s", gen, strings.Repeat("R", 60))
}

func (m *openaiAuthMock) log() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.seen...)
}

func (m *openaiAuthMock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path != "/oauth/token" {
		m.seen = append(m.seen, "other "+r.Host+" "+r.Method+" "+r.URL.Path)
		w.WriteHeader(404)
		return
	}
	var req map[string]any
	if json.Unmarshal(body, &req) != nil {
		form, _ := url.ParseQuery(string(body))
		req = map[string]any{"grant_type": form.Get("grant_type"), "refresh_token": form.Get("refresh_token")}
	}
	rt, _ := req["refresh_token"].(string)
	m.seen = append(m.seen, fmt.Sprintf("token %v %s", req["grant_type"], rt))
	if _, _, cur := m.tokens(m.gen, time.Time{}); req["grant_type"] == "refresh_token" && rt != cur {
		w.WriteHeader(400)
		io.WriteString(w, `{"error":"invalid_grant"}`)
		return
	}
	m.gen++
	// Generation 1 (the login) is already expired, so Codex must refresh.
	exp := time.Now().Add(time.Hour)
	if m.gen == 1 {
		exp = time.Now().Add(-time.Hour)
	}
	id, a, r2 := m.tokens(m.gen, exp)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id_token":%q,"access_token":%q,"refresh_token":%q,"token_type":"Bearer","expires_in":3600}`, id, a, r2)
}

// TestRunProxiedCodexChatGPTLogin runs the real, unmodified Codex CLI in
// `vak run --network proxied` with a "Sign in with ChatGPT" login whose
// tokens the sandbox holds only as phantoms ([logins] provider openai):
// the login (a code exchange through the gateway) leaves phantoms in
// auth.json, expired and old enough that Codex refreshes them with the
// refresh phantom (the mock token endpoint must see the real refresh
// token), then sends the prompt to the ChatGPT backend with the new access
// phantom (the mock must see the real rotated access token). Nothing in
// the sandbox's home, workspace, environment or processes holds a real
// token; the access phantom toward another allowed host is refused. Every
// other ChatGPT backend call Codex makes (models, account check, plugins)
// carries the real rotated token too. Codex takes its token URL from
// CODEX_REFRESH_TOKEN_URL_OVERRIDE (the real host name, an unprivileged
// port), but reaches the ChatGPT backend at https://chatgpt.com whatever
// chatgpt_base_url says, so that mock listens on 443: as an unprivileged
// user only while net.ipv4.ip_unprivileged_port_start allows it
// (scripts/test-nonroot lowers it for this test's leg).
// Codex 0.171 asks the backend where the account's workspace is served
// (/backend-api/wham/accounts/check) before it samples; the mock answers
// with the one personal account it needs.
func TestRunProxiedCodexChatGPTLogin(t *testing.T) {
	testenv.RequireLandlock(t)
	codex := codexCLI(t)
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Cleanup(func() { stopOnDemand(t) })
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	const mockIP = "127.0.0.8"
	auth := &openaiAuthMock{}
	authPort := tlsMock(t, ca, mockIP, 0, auth, "auth.openai.com")
	var otherMu sync.Mutex
	var others []string
	other := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherMu.Lock()
		others = append(others, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		otherMu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/wham/accounts/check"):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"accounts":[{"id":"acct-mock","account_id":"acct-mock","plan_type":"pro","structure":"personal","is_default":true,"workspace_backend_origin":"https://chatgpt.com","account_routing_override":"NO_CONSTRAINT"}],"account_ordering":["acct-mock"]}`)
		case strings.HasSuffix(r.URL.Path, "/codex/models"):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"models":[]}`)
		default:
			http.NotFound(w, r)
		}
	})
	model := mockmodel.StartOnWith(t, egresstest.Listen(t, mockIP, 443), &tls.Config{Certificates: []tls.Certificate{ca.Cert(t, "chatgpt.com", "other.test")}},
		func(n int, r mockmodel.Request) []mockmodel.Item {
			return []mockmodel.Item{{Text: "answered-by-mock-chatgpt"}}
		}, other)
	cfg := writeConfig(t, `version = 1
[sandbox]
read = [`+strconv.Quote(filepath.Dir(codex))+`]
[network]
policy = "proxied"
[[network.rules]]
name = "openai"
hosts = ["auth.openai.com", "chatgpt.com", "other.test"]
cidrs = ["`+mockIP+`/32"]
[network.dns.overrides]
"auth.openai.com" = ["`+mockIP+`"]
"chatgpt.com" = ["`+mockIP+`"]
"other.test" = ["`+mockIP+`"]
[gateway]
extra_ca_bundles = [`+strconv.Quote(caFile)+`]
[logins.codex]
provider = "openai"
[session]
run_network_idle = "0"
`)
	ws := tempWorkspace(t)
	tokenURL := fmt.Sprintf("https://auth.openai.com:%d/oauth/token", authPort)
	script := `set -e
export CODEX_HOME="$HOME/.codex" CODEX_REFRESH_TOKEN_URL_OVERRIDE=` + tokenURL + `
mkdir -p "$CODEX_HOME"
printf 'model = "gpt-5-codex"\ncli_auth_credentials_store = "file"\napproval_policy = "never"\nsandbox_mode = "danger-full-access"\n[features]\nenable_request_compression = false\n' > "$CODEX_HOME/config.toml"
curl -sS --max-time 10 -H 'Content-Type: application/json' -d '{"grant_type":"authorization_code","code":"c","client_id":"app_mock"}' ` + tokenURL + ` > /tmp/tok.json
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" /tmp/tok.json; }
printf '{"OPENAI_API_KEY":null,"tokens":{"id_token":"%s","access_token":"%s","refresh_token":"%s","account_id":"acct-mock"},"last_refresh":"2026-01-01T00:00:00Z"}' "$(field id_token)" "$(field access_token)" "$(field refresh_token)" > "$CODEX_HOME/auth.json"
echo login-done
set +e
RUST_LOG=warn ` + strconv.Quote(codex) + ` exec --skip-git-repo-check 'say hi' 2>&1; echo codex-rc=$?
at2=$(sed -n 's/.*"access_token": *"\([^"]*\)".*/\1/p' "$CODEX_HOME/auth.json")
curl -sS --max-time 10 -H "Authorization: Bearer $at2" https://other.test/; echo
echo "REAL in home: $(grep -rlE 'REAL[0-9]{2}x' "$HOME" 2>/dev/null | wc -l), workspace: $(grep -rlE 'REAL[0-9]{2}x' . 2>/dev/null | wc -l), env: $(env | grep -cE 'REAL[0-9]{2}x'), processes: $(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -acE 'REAL[0-9]{2}x')"
`
	start := time.Now()
	code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--network", "proxied", "--home", "fresh", "--", "sh", "-c", script)
	seen := auth.log()
	reqs := model.Requests()
	t.Logf("vak run: exit %d in %v; the token endpoint saw %q; the model API %d requests", code, time.Since(start).Round(time.Millisecond), seen, len(reqs))
	if code != 0 || !strings.Contains(out, "answered-by-mock-chatgpt") || !strings.Contains(out, "codex-rc=0") {
		t.Fatalf("codex exec did not answer: exit %d\n%s\n%s", code, out, errs)
	}
	if strings.Contains(out+errs, "REAL0") || !strings.Contains(out, "REAL in home: 0, workspace: 0, env: 0, processes: 0") {
		t.Fatalf("a real token reached the sandbox or vak's output:\n%s\n%s", out, errs)
	}
	if len(reqs) == 0 {
		t.Fatal("the model API got no request")
	}
	if !strings.Contains(out, "in request header Authorization to other.test is not allowed") {
		t.Errorf("the access phantom toward other.test was not refused:\n%s", out)
	}
	_, _, realR1 := auth.tokens(1, time.Time{})
	if !slicesContains(seen, "token refresh_token "+realR1) {
		t.Errorf("want a refresh with the real refresh token; the token endpoint saw %q", seen)
	}
	_, realA2, _ := auth.tokens(2, time.Time{})
	// Codex's other ChatGPT backend calls (models, account check,
	// plugins) carry the real rotated token too, never a phantom.
	otherMu.Lock()
	defer otherMu.Unlock()
	realSig := realA2[strings.LastIndex(realA2, ".")+1:]
	for _, o := range others {
		if !strings.HasSuffix(o, "."+realSig) {
			t.Errorf("a ChatGPT backend request did not carry the real rotated access token: %.80s", o)
		}
	}
	t.Logf("the ChatGPT backend saw %d requests besides the model's", len(others))
	for i, r := range reqs {
		// The JWT's claims hold its expiry, which differs per call of
		// tokens: compare the signature part, which names the generation.
		sig := r.Authorization[strings.LastIndex(r.Authorization, ".")+1:]
		if !strings.HasPrefix(r.Authorization, "Bearer ") || sig != realSig {
			t.Errorf("model request %d carried %q, want the real rotated access token", i, r.Authorization)
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
