package dockerguard

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// setupPolicy is setup with a policy of the caller's (p gets the
// workspace, trust dir and sockets filled in).
func setupPolicy(t *testing.T, edit func(ws string, p *Policy)) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{up: &upstream{}, ws: filepath.Join(dir, "ws"), trust: filepath.Join(dir, "trust")}
	os.MkdirAll(e.ws, 0o755)
	os.MkdirAll(e.trust, 0o755)
	e.rawSock = filepath.Join(dir, "raw.sock")
	serve(t, e.up, e.rawSock)
	e.sock = filepath.Join(dir, "guard.sock")
	p := Policy{
		Workspace: e.ws, TrustDir: e.trust,
		Pool: netip.MustParsePrefix("10.213.0.0/16"), DNS: netip.MustParseAddr("172.30.0.2"),
		Labels: map[string]string{"vak.owner": "t"}, GuardSocket: e.sock,
	}
	edit(e.ws, &p)
	g, err := New(p, e.rawSock)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, g, e.sock)
	e.client = unixClient(e.sock)
	return e
}

func forwardedEnv(t *testing.T, e *env, body string) []string {
	t.Helper()
	_, msg, fwd := e.do(t, e.client, "POST", "/v1.41/containers/create", body)
	if fwd == nil {
		t.Fatalf("not forwarded: %s", msg)
	}
	var got struct{ Env []string }
	if err := json.Unmarshal(fwd.Body, &got); err != nil {
		t.Fatal(err)
	}
	return got.Env
}

// Placeholder propagation: without Policy.Env (the default) an inner
// container gets no placeholder; with it, every create gets the named
// ones unless the request sets the name itself.
func TestPlaceholderPropagation(t *testing.T) {
	const ph = "TOKEN=vak-placeholder-0123"
	off := setupPolicy(t, func(string, *Policy) {})
	if env := forwardedEnv(t, off, `{"Image":"app:1","Env":["A=1"],"HostConfig":{}}`); slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "TOKEN=") }) {
		t.Errorf("default policy: an inner container got a placeholder: %v", env)
	}
	on := setupPolicy(t, func(_ string, p *Policy) { p.Env = []string{ph} })
	if env := forwardedEnv(t, on, `{"Image":"app:1","Env":["A=1"],"HostConfig":{}}`); !slices.Contains(env, ph) || !slices.Contains(env, "A=1") {
		t.Errorf("opt-in: env %v lacks %s", env, ph)
	}
	if env := forwardedEnv(t, on, `{"Image":"app:1","Env":["TOKEN=mine"],"HostConfig":{}}`); !slices.Contains(env, "TOKEN=mine") || slices.Contains(env, ph) {
		t.Errorf("opt-in: the request's own TOKEN was replaced: %v", env)
	}
	args := strings.Join(Args(Policy{Workspace: "/w", TrustDir: "/t", Pool: netip.MustParsePrefix("10.213.0.0/16"), DNS: netip.MustParseAddr("10.0.0.1"), Env: []string{ph}, StageDir: "/run/x"}, "/raw"), " ")
	if !strings.Contains(args, "--env "+ph) || !strings.Contains(args, "--stage-binds /run/x") {
		t.Errorf("Args: %s", args)
	}
}

// A non-recursive bind of the workspace would drop the read-only
// protected mounts under it: refused (control: the recursive bind).
func TestNonRecursiveBindDenied(t *testing.T) {
	e := setupPolicy(t, func(string, *Policy) {})
	bind := func(opts string) string {
		return `{"Image":"app:1","HostConfig":{"Mounts":[{"Type":"bind","Source":"` + e.ws + `","Target":"/w"` + opts + `}]}}`
	}
	code, msg, fwd := e.do(t, e.client, "POST", "/v1.41/containers/create", bind(`,"BindOptions":{"NonRecursive":true}`))
	if code != 403 || fwd != nil || !strings.Contains(msg, "NonRecursive") {
		t.Errorf("non-recursive bind: %d %s forwarded=%v", code, msg, fwd != nil)
	}
	if _, msg, fwd := e.do(t, e.client, "POST", "/v1.41/containers/create", bind("")); fwd == nil {
		t.Errorf("control: the recursive bind was not forwarded: %s", msg)
	}
}
