package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"vak/internal/config"
	"vak/internal/egress/egresstest"
	"vak/internal/egress/ondemand"
	"vak/internal/errclass"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// setup gives t a private state dir and a user config of body, and loads
// the config for a fresh workspace, as the command line would (once).
func setup(t *testing.T, body string) (ws string, cfg *config.Config, file string) {
	t.Helper()
	t.Setenv(paths.EnvStateHome, t.TempDir())
	file = filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = config.Load(config.Options{UserFile: file, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	return ws, cfg, file
}

// request is a Request for ws and cfg that runs the built vak as worker
// and labels what it creates as t's.
func request(t *testing.T, ws string, cfg *config.Config, file string) Request {
	return Request{Workspace: ws, Config: cfg, UserConfig: file, Executable: testenv.Vak(t), OneCommand: true,
		Labels: map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: testenv.TestID(t)},
		Warn:   func(s string) { t.Logf("warning: %s", s) }}
}

// bash runs script in r's session and returns its output and status.
func bash(t *testing.T, r *Run, script string) (string, int) {
	t.Helper()
	var out strings.Builder
	res, err := r.Session.Bash(r.Context, wire.BashArgs{Command: script, Stream: true}, func(_ string, b []byte) { out.Write(b) })
	if err != nil {
		t.Fatalf("bash %q: %v", script, err)
	}
	return out.String(), res.ExitCode
}

// TestStartRunLandlock starts a run through Start on the native backend.
func TestStartRunLandlock(t *testing.T) {
	testenv.RequireLandlock(t)
	testStartRun(t, sandbox.Landlock, "version = 1\n[sandbox]\nbackend = \"landlock\"\n")
}

// TestStartRunDocker starts a run through Start on the docker backend.
func TestStartRunDocker(t *testing.T) {
	testenv.CheckLeftovers(t)
	testStartRun(t, sandbox.Docker, "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \""+testenv.Image(t)+"\"\n")
}

// testStartRun runs one command that writes the workspace through Start
// on backend, and checks that Close leaves nothing to report.
func testStartRun(t *testing.T, backend sandbox.Name, body string) {
	ws, cfg, file := setup(t, body)
	r, err := Start(context.Background(), request(t, ws, cfg, file))
	if err != nil {
		t.Fatal(err)
	}
	if r.Backend.Name() != string(backend) || r.Network != nil || r.Session == nil {
		r.Close()
		t.Fatalf("run: backend %s, network %+v, session %v", r.Backend.Name(), r.Network, r.Session)
	}
	out, code := bash(t, r, "touch made && echo ran")
	if sw := r.Close(); sw != nil && len(sw.ProtectedRemoved)+len(sw.SetuidCleared) > 0 {
		t.Errorf("sweep: %+v", sw)
	}
	if code != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(ws, "made")); err != nil {
		t.Fatalf("the command's file: %v", err)
	}
}

// TestStartProxiedDocker: a docker proxied run through Start joins the
// workspace's topology (no fence), its command runs, and Close (no
// run_network_idle) removes the topology: the test's leftover check finds
// no network, container or volume.
func TestStartProxiedDocker(t *testing.T) {
	testenv.CheckLeftovers(t)
	ws, cfg, file := setup(t, `version = 1
[sandbox]
backend = "docker"
image = "`+testenv.Image(t)+`"
[network]
policy = "proxied"
[[network.rules]]
name = "api"
hosts = ["api.test"]
`)
	r, err := Start(context.Background(), request(t, ws, cfg, file))
	if err != nil {
		t.Fatal(err)
	}
	if r.Network == nil || r.Network.Fence != nil || !strings.HasPrefix(r.Network.Mode, "container:") {
		r.Close()
		t.Fatalf("network = %+v, want the workspace's topology", r.Network)
	}
	out, code := bash(t, r, "echo ran")
	r.Close()
	if code != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("exit %d: %s", code, out)
	}
	if got := testenv.Docker(t, "network", "ls", "-q", "--filter", "label=vak.workspace="+ws); got != "" {
		t.Fatalf("the topology outlived the run: networks %s", got)
	}
}

// TestStartUnavailable: a backend that cannot run is ErrUnavailable
// (class errclass.Unavailable) naming the backend, and nothing starts.
func TestStartUnavailable(t *testing.T) {
	ws, cfg, file := setup(t, "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"vak-test:latest\"\n")
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-daemon.sock"))
	r, err := Start(context.Background(), request(t, ws, cfg, file))
	if err == nil {
		r.Close()
		t.Fatal("Start succeeded without a daemon")
	}
	if !errors.Is(err, ErrUnavailable) || errclass.Of(err) != errclass.Unavailable || errors.Is(err, ErrNotInteractive) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "sandbox backend docker") || !strings.Contains(err.Error(), "nothing was run") {
		t.Fatalf("err = %v, want it to name the backend and say nothing ran", err)
	}
	// Positive control: the same request without a session's worker is
	// refused before anything ran, not by a worker that failed later.
	if _, err := Start(context.Background(), Request{Config: cfg}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a request without a workspace: %v", err)
	}
}

// TestStartDeferred: an MCP server's run starts no broker itself; each
// StartBroker is a worker on the same backend.
func TestStartDeferred(t *testing.T) {
	testenv.RequireLandlock(t)
	ws, cfg, file := setup(t, "version = 1\n[sandbox]\nbackend = \"landlock\"\n")
	req := request(t, ws, cfg, file)
	req.Deferred, req.OneCommand = true, false
	r, err := Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Session != nil {
		t.Fatal("a deferred run started a broker")
	}
	for i := range 2 {
		s, err := r.StartBroker(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Bash(context.Background(), wire.BashArgs{Command: "echo worker-" + strconv.Itoa(i)}, nil)
		s.Close()
		if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "worker-"+strconv.Itoa(i)) {
			t.Fatalf("worker %d: %+v %v", i, res, err)
		}
	}
}

// TestStartProxiedNative: a native proxied run through Start is fenced
// toward the on-demand gateway: the allowed HTTPS host answers (the CA
// trusted from the environment), a host no rule lists is never reached
// (its canary counts 0 while a control connection from the host counts 1),
// and the gateway's secret reaches the upstream in place of its
// placeholder (the secret's value read from the config loaded once).
func TestStartProxiedNative(t *testing.T) {
	testenv.RequireLandlock(t)
	const secret = "vak-launch-real-secret-0123456789"
	t.Setenv("VAKTEST_LAUNCH_KEY", secret)
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	got := make(chan string, 4)
	api := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.2", 0), ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-Key")
		fmt.Fprintln(w, "UPSTREAM-api")
	}), "api.test")
	canary := egresstest.StartCanary(t, egresstest.Listen(t, "127.0.0.4", 0))
	ws, cfg, file := setup(t, fmt.Sprintf(`version = 1
[sandbox]
backend = "landlock"
[network]
policy = "proxied"
[[network.rules]]
name = "api"
hosts = ["api.test"]
cidrs = ["127.0.0.2/32"]
[network.dns.overrides]
"api.test" = ["127.0.0.2"]
[gateway]
extra_ca_bundles = [%q]
[secrets.LAUNCH_KEY]
env = "VAKTEST_LAUNCH_KEY"
hosts = ["api.test"]
`, caFile))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := ondemand.Stop(ctx, filepath.Join(os.Getenv(paths.EnvStateHome), "vak")); err != nil {
			t.Errorf("stop the on-demand gateway: %v", err)
		}
	})
	probe := filepath.Join(ws, "probe")
	data, err := os.ReadFile(testenv.Probe(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(probe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// Control: the canary counts a connection from the host.
	c, err := net.Dial("tcp", canary.L.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	for deadline := time.Now().Add(time.Minute); canary.Accepted.Load() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the control connection never reached the canary")
		}
	}

	r, err := Start(context.Background(), request(t, ws, cfg, file))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Network == nil || r.Network.Fence == nil {
		t.Fatalf("network = %+v, want the on-demand gateway's fence", r.Network)
	}
	url := "https://api.test:" + strconv.Itoa(api.Port()) + "/"
	out, code := bash(t, r, `env | grep -c `+secret+`; curl -sS --max-time 10 -H "X-Key: $LAUNCH_KEY" `+url+`; ./probe connect 127.0.0.4:`+strconv.Itoa(canary.Port())+` 3s`)
	t.Logf("exit %d: %s", code, out)
	if !strings.HasPrefix(out, "0\n") {
		t.Errorf("the real secret is in the sandbox's environment: %s", out)
	}
	if !strings.Contains(out, "UPSTREAM-api") {
		t.Fatalf("the allowed host did not answer through the gateway: %s", out)
	}
	select {
	case k := <-got:
		if k != secret {
			t.Errorf("the upstream got X-Key %q, want the real secret", k)
		}
	case <-time.After(time.Minute):
		t.Fatal("the upstream saw no request")
	}
	if n := canary.Accepted.Load(); n != 1 {
		t.Fatalf("the canary counted %d connections, want only the control's", n)
	}
}
