package docker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/engine"
	"vak/internal/sandbox"
	"vak/internal/testenv"
)

// recordingDaemon is an Engine API endpoint that answers pings and records
// every container create request, refusing it (so no client goes on).
type recordingDaemon struct {
	host string
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	name string
	body map[string]any
}

func newRecordingDaemon(t *testing.T) *recordingDaemon {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	d := &recordingDaemon{host: "unix://" + sock}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		if !strings.HasSuffix(r.URL.Path, "/containers/create") {
			w.Write([]byte("OK"))
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("create body: %v", err)
		}
		d.mu.Lock()
		d.reqs = append(d.reqs, recorded{r.URL.Query().Get("name"), body})
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"message":"recorded"}`))
	}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return d
}

func (d *recordingDaemon) last(t *testing.T) recorded {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.reqs) == 0 {
		t.Fatal("no create request reached the daemon")
	}
	r := d.reqs[len(d.reqs)-1]
	d.reqs = nil
	return r
}

// meaningful drops what carries no setting (zero values, empty lists
// and objects, all-zero lists such as an unset console size), so that two
// clients that spell "unset" differently compare equal.
func meaningful(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, x := range v {
			if x = meaningful(x); x != nil {
				m[k] = x
			}
		}
		if len(m) == 0 {
			return nil
		}
		return m
	case []any:
		var l []any
		zero := true
		for _, x := range v {
			l = append(l, meaningful(x))
			zero = zero && (x == nil || x == float64(0))
		}
		if len(l) == 0 || zero {
			return nil
		}
		return l
	case string:
		if v == "" {
			return nil
		}
	case float64:
		if v == 0 {
			return nil
		}
	case bool:
		if !v {
			return nil
		}
	}
	return v
}

// TestRunnerCreatesWhatTheCLIWould records the container create request of
// the docker CLI running Wrap's argv and of Runner for the same command,
// on one fake daemon, and requires them to be the same container: every
// limit, mount, security option, label and the lifeline's stdin. A flag
// added to Wrap and not to Runner (or the reverse) fails here.
func TestRunnerCreatesWhatTheCLIWould(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, "the docker CLI")
	}
	d := newRecordingDaemon(t)
	t.Setenv("DOCKER_HOST", d.host)
	t.Setenv("DOCKER_CONTEXT", "")
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	ws := t.TempDir()
	os.MkdirAll(ws+"/.git/hooks", 0o755)
	os.WriteFile(ws+"/.vak.toml", nil, 0o644)
	home := t.TempDir()
	cases := []struct {
		name string
		b    *Backend
		c    sandbox.Command
	}{
		{"workspace-write under another runtime", &Backend{Image: "img:1", User: User{UID: 1000, GID: 1001}, Runtime: "runsc"}, sandbox.Command{
			Shell: "echo 'a b' \"$HOME\"", Workspace: ws, Dir: ws + "/sub", Mode: sandbox.WorkspaceWrite,
			Env:        []string{"LANG=C.UTF-8", "X=a=b", "LANG=en_US.UTF-8"},
			Limits:     sandbox.Limits{Memory: 3 << 20, CPUs: 1.5, Pids: 17, TmpfsSize: 9 << 20},
			Protection: sandbox.Protection{Pin: []string{ws + "/.git"}, ReadOnly: []string{ws + "/.git/hooks", ws + "/.vak.toml"}},
		}},
		{"read-only as root with labels", &Backend{Image: "img:2", User: User{Root: true}, Labels: map[string]string{"vak.test": "1", "b": "2"}}, sandbox.Command{
			Shell: "true", Workspace: ws, Mode: sandbox.ReadOnly,
		}},
		{"proxied network and a persistent home", &Backend{User: User{UID: 5, GID: 6}}, sandbox.Command{
			Shell: "curl https://example.com", Workspace: ws, Mode: sandbox.WorkspaceWrite, AgentHome: home,
			Protection: sandbox.Protection{Pin: []string{ws + "/.git"}, ReadOnly: []string{ws + "/.vak.toml"}},
			Network: &sandbox.NetworkAttachment{Mode: "container:vak-nc-x", Binds: []string{"/state/trust:/etc/vak/trust:ro"},
				Env: []string{"HTTPS_PROXY=http://127.0.0.1:3128"}, Labels: map[string]string{"vak.proxynet.user": "x"}},
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.ID = "eq" + string(rune('a'+i))
			argv, err := tc.b.Wrap(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), "DOCKER_HOST="+d.host)
			out, err := cmd.CombinedOutput()
			if !bytes.Contains(out, []byte("recorded")) {
				t.Fatalf("docker CLI: %v: %s", err, out)
			}
			cliReq := d.last(t)

			run, err := tc.b.Runner(tc.c)
			if err != nil || run == nil {
				t.Fatalf("Runner: %v, %v", run, err)
			}
			var stderr bytes.Buffer
			code, err := run(context.Background(), nil, io.Discard, &stderr)
			if err != nil || code != cliFailure || !strings.Contains(stderr.String(), "recorded") {
				t.Fatalf("run: %d, %v, stderr %q", code, err, stderr.String())
			}
			ours := d.last(t)

			if cliReq.name != ours.name || ours.name != ContainerName(tc.c.ID) {
				t.Errorf("name: CLI %q, Runner %q", cliReq.name, ours.name)
			}
			// The CLI sends binds and environment variables in no fixed
			// order (sets of its own); the daemon mounts binds by their
			// destination's depth and sets variables by name.
			byValue := func(x, y any) int { return strings.Compare(x.(string), y.(string)) }
			for _, r := range []recorded{cliReq, ours} {
				if e, ok := r.body["Env"].([]any); ok {
					slices.SortFunc(e, byValue)
				}
				if hc, ok := r.body["HostConfig"].(map[string]any); ok {
					if b, ok := hc["Binds"].([]any); ok {
						slices.SortFunc(b, byValue)
					}
				}
			}
			for _, d := range differences("", meaningful(cliReq.body), meaningful(ours.body)) {
				t.Errorf("create requests differ at %s", d)
			}
			// Both name the runtime, runc when none is configured: never
			// the daemon's default (engine.DefaultRuntime).
			want := cmp.Or(tc.b.Runtime, engine.DefaultRuntime)
			for _, r := range []recorded{cliReq, ours} {
				if hc, _ := r.body["HostConfig"].(map[string]any); hc["Runtime"] != want {
					t.Errorf("runtime: the create request names %v, want %q (backend's %q)", hc["Runtime"], want, tc.b.Runtime)
				}
			}
		})
	}
}

// differences lists where two decoded JSON values differ, by path, with
// both values (long ones shortened).
func differences(path string, want, got any) []string {
	w, wok := want.(map[string]any)
	g, gok := got.(map[string]any)
	if wok && gok {
		var out []string
		for k := range w {
			out = append(out, differences(path+"."+k, w[k], g[k])...)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				out = append(out, differences(path+"."+k, nil, g[k])...)
			}
		}
		return out
	}
	if reflect.DeepEqual(want, got) {
		return nil
	}
	short := func(v any) string {
		b, _ := json.Marshal(v)
		if len(b) > 120 {
			return string(b[:120]) + "..."
		}
		return string(b)
	}
	return []string{fmt.Sprintf("%s: CLI %s, Runner %s", path, short(want), short(got))}
}

// TestRunsHere: the Engine API path only where the CLI would be a plain
// client of the daemon the environment names.
func TestRunsHere(t *testing.T) {
	withContext := t.TempDir()
	os.WriteFile(filepath.Join(withContext, "config.json"), []byte(`{"currentContext":"rootless"}`), 0o600)
	defaultContext := t.TempDir()
	os.WriteFile(filepath.Join(defaultContext, "config.json"), []byte(`{"currentContext":"default","auths":{}}`), 0o600)
	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, "config.json"), []byte(`{`), 0o600)
	for _, tc := range []struct {
		name                      string
		binary, host, ctx, cfgDir string
		want                      bool
	}{
		{"plain", "", "", "", t.TempDir(), true},
		{"unix host", "", "unix:///run/user/1000/docker.sock", "", withContext, true},
		{"tcp host", "", "tcp://127.0.0.1:2376", "", "", true},
		{"ssh host", "", "ssh://me@builder", "", "", false},
		{"context variable", "", "", "rootless", "", false},
		{"current context in config", "", "", "", withContext, false},
		{"default context in config", "", "", "", defaultContext, true},
		{"unreadable config", "", "", "", broken, false},
		{"another CLI", "/opt/docker/bin/docker", "", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", tc.host)
			t.Setenv("DOCKER_CONTEXT", tc.ctx)
			cfg := tc.cfgDir
			if cfg == "" {
				cfg = t.TempDir()
			}
			t.Setenv("DOCKER_CONFIG", cfg)
			b := &Backend{Binary: tc.binary}
			if got := b.RunsHere(); got != tc.want {
				t.Errorf("RunsHere = %v, want %v", got, tc.want)
			}
			// What doctor says: the path, and why the CLI.
			b.Probe = &Probe{}
			desc := b.Describe(context.Background())
			if tc.want != strings.Contains(desc, "through the Engine API") || tc.want == strings.Contains(desc, "starts the docker CLI (") {
				t.Errorf("Describe = %q", desc)
			}
			run, err := b.Runner(sandbox.Command{ID: "x", Shell: "true", Workspace: "/w", Mode: sandbox.WorkspaceWrite})
			if err != nil || (run != nil) != tc.want {
				t.Errorf("Runner = %v, %v; want a RunFunc: %v", run != nil, err, tc.want)
			}
		})
	}
}

// TestRunnerLive runs commands through Runner on the real daemon: output
// streams apart, the exit status, and the lifeline: its EOF ends a running
// command and its container (a positive control runs to the end with the
// lifeline open), and a cancel returns at once.
func TestRunnerLive(t *testing.T) {
	b := liveBackend(t)
	ws := workspace(t)
	start := func(shell string) (sandbox.RunFunc, string) {
		idn++
		id := "rl" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "") + string(rune('a'+idn%26))
		run, err := b.Runner(sandbox.Command{ID: id, Shell: shell, Workspace: ws, Mode: sandbox.WorkspaceWrite})
		if err != nil || run == nil {
			t.Fatalf("Runner: %v %v", run, err)
		}
		t.Cleanup(func() { b.Remove(context.Background(), id) })
		return run, id
	}
	lifeline := func() (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("output and status", func(t *testing.T) {
		run, _ := start(`echo out; echo err >&2; echo file > f; exit 7`)
		r, _ := lifeline()
		var out, errb bytes.Buffer
		code, err := run(ctx, r, &out, &errb)
		if err != nil || code != 7 || out.String() != "out\n" || errb.String() != "err\n" {
			t.Fatalf("run: %d %v stdout %q stderr %q", code, err, out.String(), errb.String())
		}
		if data, _ := os.ReadFile(filepath.Join(ws, "f")); string(data) != "file\n" {
			t.Errorf("workspace file: %q", data)
		}
	})
	t.Run("lifeline open: runs to the end", func(t *testing.T) {
		run, _ := start(`sleep 1; echo done`)
		r, _ := lifeline()
		var out bytes.Buffer
		code, err := run(ctx, r, &out, io.Discard)
		if err != nil || code != 0 || out.String() != "done\n" {
			t.Fatalf("run: %d %v %q", code, err, out.String())
		}
	})
	t.Run("lifeline EOF ends the command", func(t *testing.T) {
		run, id := start(`echo started; sleep 300; echo never`)
		r, w := lifeline()
		pr, pw := io.Pipe()
		type result struct {
			code int
			err  error
		}
		done := make(chan result, 1)
		go func() {
			code, err := run(ctx, r, pw, io.Discard)
			pw.Close()
			done <- result{code, err}
		}()
		line := make([]byte, 8)
		if _, err := io.ReadFull(pr, line); err != nil || string(line) != "started\n" {
			t.Fatalf("first output: %q %v", line, err)
		}
		go io.Copy(io.Discard, pr)
		w.Close()
		select {
		case res := <-done:
			if res.err != nil || res.code == 0 {
				t.Fatalf("after the lifeline's EOF: %d %v", res.code, res.err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the command outlived its lifeline")
		}
		if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "name=^"+ContainerName(id)+"$").Output(); len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("container %s still exists", ContainerName(id))
		}
	})
	t.Run("cancel returns at once", func(t *testing.T) {
		run, id := start(`sleep 300`)
		r, _ := lifeline()
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan int, 1)
		go func() {
			code, _ := run(cctx, r, io.Discard, io.Discard)
			done <- code
		}()
		waitRunning(t, id)
		ccancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("run did not return after its context was canceled")
		}
		if err := b.Remove(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	})
}

// waitRunning waits until the container named for id runs.
func waitRunning(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", ContainerName(id)).Output()
		if strings.TrimSpace(string(out)) == "true" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("container %s never ran", ContainerName(id))
}

// TestRunnerDaemonGone: a daemon that does not answer is the wrapper's own
// failure (125, the reason on stderr), and WrapperFailed then fails the
// command closed with engine.ErrDaemonUnavailable.
func TestRunnerDaemonGone(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, "the docker CLI")
	}
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "gone.sock"))
	t.Setenv("DOCKER_CONTEXT", "")
	b := &Backend{Image: "img:1", User: User{UID: 1, GID: 1}}
	run, err := b.Runner(sandbox.Command{ID: "gone", Shell: "true", Workspace: "/w", Mode: sandbox.WorkspaceWrite})
	if err != nil || run == nil {
		t.Fatalf("Runner: %v %v", run, err)
	}
	var stderr bytes.Buffer
	code, err := run(context.Background(), nil, io.Discard, &stderr)
	if err != nil || code != cliFailure || !strings.Contains(stderr.String(), "gone.sock") {
		t.Fatalf("run: %d %v, stderr %q", code, err, stderr.String())
	}
	if err := b.WrapperFailed(context.Background(), code); !errors.Is(err, engine.ErrDaemonUnavailable) {
		t.Fatalf("WrapperFailed(%d) = %v, want ErrDaemonUnavailable", code, err)
	}
	// Positive control: the command's own status is not the backend's.
	if err := b.WrapperFailed(context.Background(), 1); err != nil {
		t.Fatalf("WrapperFailed(1) = %v", err)
	}
}

// TestProbeThroughEngineAPI: where vak run uses the Engine API, so does the
// availability probe: no docker CLI is needed (PATH has none here), a
// daemon that answers is available with its version, and one that does
// not fails closed, with nothing cached.
func TestProbeThroughEngineAPI(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "v.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var asked sync.Map
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.41")
		asked.Store(r.URL.Path, true)
		if strings.HasSuffix(r.URL.Path, "/version") {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"Version":"77.0-probe","ApiVersion":"1.41"}`))
			return
		}
		w.Write([]byte("OK"))
	}))
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	t.Setenv("PATH", t.TempDir())
	t.Setenv("DOCKER_CONTEXT", "")
	t.Setenv("DOCKER_CONFIG", t.TempDir())

	t.Setenv("DOCKER_HOST", "unix://"+sock)
	cache := t.TempDir()
	b := &Backend{Probe: &Probe{CacheDir: cache}}
	if err := b.Available(context.Background()); err != nil {
		t.Fatalf("Available: %v", err)
	}
	if v := b.Probe.Version(); v != "77.0-probe" {
		t.Errorf("version %q", v)
	}
	if _, ok := asked.Load("/v1.41/version"); !ok {
		t.Errorf("the daemon was not asked its version through the API")
	}

	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "none.sock"))
	down := &Backend{Probe: &Probe{CacheDir: cache}}
	err = down.Available(context.Background())
	if !errors.Is(err, engine.ErrDaemonUnavailable) || !strings.Contains(err.Error(), "none.sock") {
		t.Fatalf("Available without a daemon = %v, want ErrDaemonUnavailable naming the socket", err)
	}
	if f := down.Probe.cacheFile(); f != "" {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("a failed probe left its cache file %s", f)
		}
	}
}
