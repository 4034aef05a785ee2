package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/egress/egresstest"
	"vak/internal/testenv"
)

// Environment of the Claude Code test.
const (
	// EnvClaude is the path of the real Claude Code CLI's native binary
	// (npm install @anthropic-ai/claude-code: the claude-code-linux-x64
	// package's claude).
	EnvClaude = "VAK_TEST_CLAUDE"
	// EnvRequireClaude makes a missing Claude Code CLI a failure.
	EnvRequireClaude = "VAK_REQUIRE_CLAUDE"
)

// anthropicMock is Anthropic's token endpoint and Messages API for Claude
// Code: the refresh with the current real refresh token rotates both
// tokens; the Messages API answers every request with one streamed text
// when it carries the current real access token, 401 otherwise. It
// records what reached it.
type anthropicMock struct {
	mu   sync.Mutex
	gen  int
	seen []string
}

func (m *anthropicMock) tokens(gen int) (string, string) {
	return fmt.Sprintf("sk-ant-oat01-REAL%02dx%s", gen, strings.Repeat("A", 80)), fmt.Sprintf("sk-ant-ort01-REAL%02dx%s", gen, strings.Repeat("R", 80))
}

func (m *anthropicMock) log() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.seen...)
}

func (m *anthropicMock) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	host := strings.Split(r.Host, ":")[0]
	switch {
	case host == "platform.claude.com" && r.URL.Path == "/v1/oauth/token":
		var req map[string]any
		json.Unmarshal(body, &req)
		rt, _ := req["refresh_token"].(string)
		m.seen = append(m.seen, fmt.Sprintf("token %v %s", req["grant_type"], rt))
		if _, cur := m.tokens(m.gen); req["grant_type"] == "refresh_token" && rt != cur {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_grant"}`)
			return
		}
		m.gen++
		a, r2 := m.tokens(m.gen)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"token_type":"Bearer","access_token":%q,"refresh_token":%q,"expires_in":28800,"scope":"user:inference user:profile"}`, a, r2)
	case host == "api.anthropic.com" && strings.HasPrefix(r.URL.Path, "/v1/messages"):
		auth := r.Header.Get("Authorization")
		m.seen = append(m.seen, "messages "+auth)
		if a, _ := m.tokens(m.gen); auth != "Bearer "+a {
			w.WriteHeader(401)
			io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid token"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`)
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"answered-by-mock-anthropic"}}`)
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}`)
		ev("message_stop", `{"type":"message_stop"}`)
	default:
		m.seen = append(m.seen, "other "+host+" "+r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}
}

// TestRunProxiedClaudeLogin runs the real, unmodified Claude Code CLI in
// `vak run --network proxied` with a subscription login whose tokens the
// sandbox holds only as phantoms: the home's access token has expired, so
// Claude Code refreshes it with the refresh phantom (the mock token
// endpoint must see the real refresh token), stores the new phantoms and
// sends the prompt with the new access phantom (the mock Messages API
// must see the real access token). Nothing in the sandbox's home,
// workspace or environment holds a real token afterwards.
func TestRunProxiedClaudeLogin(t *testing.T) {
	testenv.RequireLandlock(t)
	claude := os.Getenv(EnvClaude)
	if claude == "" {
		claude, _ = exec.LookPath("claude")
	}
	if claude == "" {
		testenv.Missing(t, EnvRequireClaude, "no Claude Code CLI (npm install @anthropic-ai/claude-code; set "+EnvClaude+" to its native binary)")
	}
	claude, err := filepath.EvalSymlinks(claude)
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Cleanup(func() { stopOnDemand(t) })
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	mock := &anthropicMock{}
	// Claude Code's token URL is fixed (https://platform.claude.com/...):
	// the mock listens on 443, which an unprivileged user may bind only
	// while net.ipv4.ip_unprivileged_port_start allows it (scripts/test-nonroot
	// lowers it for this test's leg).
	const mockIP = "127.0.0.5"
	tlsMock(t, ca, mockIP, 443, mock, "platform.claude.com", "api.anthropic.com", "*.anthropic.com", "*.claude.com", "*.claude.ai", "claude.ai", "other.test")

	cfg := writeConfig(t, `version = 1
[sandbox]
read = [`+strconv.Quote(filepath.Dir(claude))+`]
[network]
policy = "proxied"
[[network.rules]]
name = "anthropic"
hosts = ["platform.claude.com", "api.anthropic.com", "other.test"]
cidrs = ["`+mockIP+`/32"]
[network.dns.overrides]
"platform.claude.com" = ["`+mockIP+`"]
"api.anthropic.com" = ["`+mockIP+`"]
"other.test" = ["`+mockIP+`"]
[gateway]
extra_ca_bundles = [`+strconv.Quote(caFile)+`]
[logins.claude]
provider = "anthropic"
[session]
run_network_idle = "0"
`)
	ws := tempWorkspace(t)
	// The login: a code exchange through the gateway (what `claude`'s
	// login does), its answer written as Claude Code's credentials file
	// with the access token already expired, so the CLI must refresh.
	login := `set -e
mkdir -p "$HOME/.claude"
curl -sS --max-time 10 -H 'Content-Type: application/json' -d '{"grant_type":"authorization_code","code":"c"}' https://platform.claude.com/v1/oauth/token > /tmp/tok.json
at=$(sed -n 's/.*"access_token":"\([^"]*\)".*/\1/p' /tmp/tok.json)
rt=$(sed -n 's/.*"refresh_token":"\([^"]*\)".*/\1/p' /tmp/tok.json)
printf '{"claudeAiOauth":{"accessToken":"%s","refreshToken":"%s","expiresAt":%s,"scopes":["user:inference","user:profile"],"subscriptionType":"max"}}' "$at" "$rt" "$(( $(date +%s) - 3600 ))000" > "$HOME/.claude/.credentials.json"
printf '{"hasCompletedOnboarding":true,"oauthAccount":{"accountUuid":"u","emailAddress":"dev@example.com","organizationUuid":"o"}}' > "$HOME/.claude.json"
echo login-done
` + strconv.Quote(claude) + ` -p 'say hi' --model claude-test 2>&1; echo claude-rc=$?
at2=$(sed -n 's/.*"accessToken":"\([^"]*\)".*/\1/p' "$HOME/.claude/.credentials.json")
curl -sS --max-time 10 -H "Authorization: Bearer $at2" https://other.test/; echo
# The real tokens hold REAL<2 digits>x; the pattern does not match itself.
echo "REAL in home: $(grep -rlE 'REAL[0-9]{2}x' "$HOME" 2>/dev/null | wc -l), workspace: $(grep -rlE 'REAL[0-9]{2}x' . 2>/dev/null | wc -l), env: $(env | grep -cE 'REAL[0-9]{2}x'), processes: $(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | grep -acE 'REAL[0-9]{2}x')"
`
	start := time.Now()
	code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--network", "proxied", "--home", "fresh", "--", "sh", "-c", login)
	seen := mock.log()
	t.Logf("vak run: exit %d in %v; the mock saw %d requests", code, time.Since(start).Round(time.Millisecond), len(seen))
	if code != 0 || !strings.Contains(out, "answered-by-mock-anthropic") || !strings.Contains(out, "claude-rc=0") {
		t.Fatalf("claude -p did not answer: exit %d\n%s\n%s\nthe mock saw:\n%s", code, out, errs, strings.Join(seen, "\n"))
	}
	if strings.Contains(out, "REAL0") || strings.Contains(errs, "REAL0") || !strings.Contains(out, "REAL in home: 0, workspace: 0, env: 0, processes: 0") {
		t.Fatalf("a real token reached the sandbox or vak's output:\n%s\n%s", out, errs)
	}
	// (d) The new access phantom toward another allowed host: refused by
	// the gateway, never seen there.
	if !strings.Contains(out, "in request header Authorization to other.test is not allowed") {
		t.Errorf("the access phantom toward other.test was not refused:\n%s", out)
	}
	_, realR1 := mock.tokens(1)
	realA2, _ := mock.tokens(2)
	var refreshed, answered bool
	for _, s := range seen {
		refreshed = refreshed || s == "token refresh_token "+realR1
		answered = answered || s == "messages Bearer "+realA2
		if strings.Contains(s, "Bearer ") && !strings.Contains(s, "REAL") {
			t.Errorf("a phantom left the gateway: %q", s)
		}
		if strings.Contains(s, "other.test") {
			t.Errorf("other.test was reached: %q", s)
		}
	}
	if !refreshed || !answered {
		t.Errorf("want the refresh with the real refresh token and the prompt with the rotated real access token; the mock saw:\n%s", strings.Join(seen, "\n"))
	}
}
