// Package sandboxtest is the behavioural conformance suite every sandbox
// backend must pass. Each check attempts an escape through a real worker
// (the vak binary, re-executed exactly as in production), asserts that it
// failed, and proves that the attempt was really made: the target exists
// and is reachable without the sandbox, or the same operation succeeds on a
// permitted target.
package sandboxtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// Backend builds the backend under test for a config.
type Backend func(t *testing.T, cfg *config.Config) sandbox.Backend

// Env is one test's world: a workspace, a fake HOME with planted secrets,
// and a directory outside both.
type Env struct {
	T         *testing.T
	Workspace string
	Home      string
	Outside   string
	Secret    string // path of a planted secret under Home
	Marker    string // the secret's content
	Probe     string // static probe binary inside the workspace
	Config    *config.Config
	// OneCommand starts sessions as vak run does (broker.Options.OneCommand).
	OneCommand bool
	// Planted is the sessions' broker.Options.Planted.
	Planted func(*wire.BashResult)
	backend Backend
}

// NewEnv prepares a world. HOME is pointed at a fresh directory holding
// ~/.ssh/id_ed25519 and ~/.aws/credentials with a random marker.
func NewEnv(t *testing.T, b Backend) *Env {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, backend: b, Marker: fmt.Sprintf("VAK-SECRET-%d-%d", os.Getpid(), time.Now().UnixNano())}
	e.Home = filepath.Join(base, "home")
	e.Outside = filepath.Join(base, "outside")
	ws := filepath.Join(base, "ws")
	for _, d := range []string{e.Home + "/.ssh", e.Home + "/.aws", e.Outside, ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The docker backend maps to the invoking uid; make the workspace
	// writable whoever that is.
	os.Chmod(ws, 0o777)
	e.Secret = filepath.Join(e.Home, ".ssh", "id_ed25519")
	os.WriteFile(e.Secret, []byte(e.Marker+"\n"), 0o600)
	os.WriteFile(filepath.Join(e.Home, ".aws", "credentials"), []byte("aws_secret_access_key="+e.Marker+"\n"), 0o600)
	t.Setenv("HOME", e.Home)
	// vak's state dir in its default place, inside the home: persistent
	// homes (the default --home) are kept there, and the sandbox must see
	// only its own.
	t.Setenv(paths.EnvStateHome, filepath.Join(e.Home, ".local", "state"))
	if e.Workspace, err = paths.CanonicalWorkspace(ws); err != nil {
		t.Fatal(err)
	}
	e.Probe = filepath.Join(e.Workspace, "probe")
	copyFile(t, testenv.Probe(t), e.Probe)
	e.Config = config.Default()
	return e
}

// bashOnly makes Env.Start start bash-only sessions (RunBashOnly).
var bashOnly bool

// Start starts a worker in mode with the env's config (a bash-only session
// under RunBashOnly).
func (e *Env) Start(mode sandbox.Mode) *broker.Session {
	e.T.Helper()
	cfg := *e.Config
	cfg.Sandbox.Mode = mode
	b := e.backend(e.T, &cfg)
	if err := b.Available(context.Background()); err != nil {
		e.T.Fatalf("backend %s unavailable: %v", b.Name(), err)
	}
	// Build vak before the start's deadline runs: a build on a loaded
	// machine (or under the GOGC=1 of a test) can take longer than it.
	vak := testenv.Vak(e.T)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := broker.Start(ctx, broker.Options{
		Config:     &cfg,
		Workspace:  e.Workspace,
		Backend:    b,
		Executable: vak,
		Stderr:     testWriter{e.T},
		Labels:     map[string]string{testenv.TestLabel: "1"},
		BashOnly:   bashOnly,
		OneCommand: e.OneCommand,
		Planted:    e.Planted,
	})
	if err != nil {
		e.T.Fatalf("start %s worker: %v", b.Name(), err)
	}
	e.T.Cleanup(func() { s.Close() })
	return s
}

// Sh runs a command and returns its result.
func Sh(t *testing.T, s *broker.Session, command string) *wire.BashResult {
	t.Helper()
	return ShArgs(t, s, wire.BashArgs{Command: command})
}

// ShArgs runs a bash request.
func ShArgs(t *testing.T, s *broker.Session, a wire.BashArgs) *wire.BashResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.Bash(ctx, a, nil)
	if err != nil {
		t.Fatalf("bash %q: %v", a.Command, err)
	}
	return res
}

// waitUntil polls cond until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// waitGone waits until no live process's command line contains tag (a
// generous deadline: a process the kill missed lives on).
func waitGone(t *testing.T, tag string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var left []int
	var err error
	if !waitUntil(ctx, func() bool {
		left, err = liveWith(tag)
		return err == nil && len(left) == 0
	}) {
		t.Fatalf("processes of the killed command are still alive: %v %v", left, err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("worker: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
}

// Listener counts TCP connections it accepts.
type Listener struct {
	net.Listener
	Accepted atomic.Int64
}

// WaitAccepted waits until the listener has counted at least n connections
// (the accept loop counts asynchronously: a control connection that the
// client already saw succeed may not be counted yet), and fails the test
// if that does not happen within ten seconds.
func (l *Listener) WaitAccepted(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Accepted.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("control: %s counted %d connections, want %d", l.Addr(), l.Accepted.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Listen starts a counting TCP listener on addr ("127.0.0.1:0", ...).
func Listen(t *testing.T, addr string) *Listener { return listenCounting(t, "tcp", addr) }

// listenCounting listens on network/addr and counts accepted connections
// until the test ends.
func listenCounting(t *testing.T, network, addr string) *Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{Listener: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.Accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}

// HostProbe runs the probe directly on the host (the control for network
// tests: the probe itself works and the target is reachable).
func HostProbe(t *testing.T, e *Env, args ...string) string {
	t.Helper()
	out, _ := exec.Command(e.Probe, args...).CombinedOutput()
	return string(out)
}

// NonLoopbackIP returns an IPv4 address of this host that is not loopback.
func NonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this host")
	return ""
}

// HostProbeIn runs the probe on the host in dir (the control for attempts
// that act on the current directory).
func HostProbeIn(t *testing.T, e *Env, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(e.Probe, args...)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	return string(out)
}
