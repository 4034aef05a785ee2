package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/testenv"
)

// liveBackend returns a backend on the test image, mapping to a fixed
// non-root uid:gid so ownership checks mean something even when tests run as root.
func liveBackend(t *testing.T) *Backend {
	t.Helper()
	img := testenv.Image(t)
	return &Backend{Image: img, User: User{UID: 4242, GID: 4343}, Labels: map[string]string{testenv.TestLabel: "1"}}
}

func workspace(t *testing.T) string {
	t.Helper()
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The mapped user must be able to write into the workspace root.
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	return ws
}

var idn int

func run(t *testing.T, b *Backend, mode sandbox.Mode, ws, shell string) (string, string, int) {
	t.Helper()
	idn++
	c := sandbox.Command{ID: fmt.Sprintf("t%d%d", os.Getpid(), idn), Shell: shell, Workspace: ws, Mode: mode}
	argv, err := b.Wrap(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	// The lifeline (see LifelineInit): open while the command runs.
	lr, lw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = lr
	err = cmd.Run()
	lr.Close()
	lw.Close()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code == 125 {
		t.Fatalf("docker run failed (125): %s", errb.String())
	}
	return out.String(), errb.String(), code
}

// Live exec: marker output from inside the container.
func TestLiveExec(t *testing.T) {
	b := liveBackend(t)
	ws := workspace(t)
	out, _, code := run(t, b, sandbox.WorkspaceWrite, ws, `echo "marker-$((6*7))"; pwd; id -u; id -g; echo "home=$HOME"; cat /proc/1/status | grep ^CapEff`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{"marker-42\n", ws + "\n", "4242\n4343\n", "home=/tmp\n", "CapEff:\t0000000000000000"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	// The exit status comes through.
	if _, _, code := run(t, b, sandbox.WorkspaceWrite, ws, "exit 7"); code != 7 {
		t.Errorf("exit status = %d, want 7", code)
	}
}

// A container write appears in the host workspace, owned by the
// mapped user, and HOME is writable.
func TestMountVisibility(t *testing.T) {
	b := liveBackend(t)
	ws := workspace(t)
	_, errs, code := run(t, b, sandbox.WorkspaceWrite, ws, `echo hello > from-container && mkdir -p d/e && touch d/e/f && touch "$HOME/.cache-test"`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	data, err := os.ReadFile(filepath.Join(ws, "from-container"))
	if err != nil || string(data) != "hello\n" {
		t.Fatalf("host sees %q, %v", data, err)
	}
	for _, p := range []string{"from-container", "d/e/f"} {
		uid, gid := owner(t, filepath.Join(ws, p))
		if uid != 4242 || gid != 4343 {
			t.Errorf("%s owned by %d:%d, want 4242:4343", p, uid, gid)
		}
	}
}

// Read-only enforcement: writes to the mounted tree and to the
// root filesystem fail and the file is intact; only /tmp is writable.
func TestReadOnlyEnforced(t *testing.T) {
	b := liveBackend(t)
	ws := workspace(t)
	f := filepath.Join(ws, "keep.txt")
	if err := os.WriteFile(f, []byte("original"), 0o666); err != nil {
		t.Fatal(err)
	}
	out, _, code := run(t, b, sandbox.ReadOnly, ws, `
		for p in keep.txt new.txt; do (echo evil > "$p") 2>/dev/null && echo "WROTE $p"; done
		rm -f keep.txt 2>/dev/null && echo "REMOVED"
		(echo x > /etc/evil) 2>/dev/null && echo "WROTE /etc"
		echo ok > /tmp/scratch && echo "TMP OK"
		cat keep.txt`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if strings.Contains(out, "WROTE") || strings.Contains(out, "REMOVED") {
		t.Fatalf("read-only mode allowed a write: %s", out)
	}
	if !strings.Contains(out, "TMP OK") || !strings.Contains(out, "original") {
		t.Fatalf("control failed (tmp not writable or file unreadable): %s", out)
	}
	if data, _ := os.ReadFile(f); string(data) != "original" {
		t.Fatalf("file changed to %q", data)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
		t.Fatal("new.txt was created")
	}
	// In workspace-write the same writes succeed (the attempt is real).
	out, _, _ = run(t, b, sandbox.WorkspaceWrite, ws, `(echo evil > new.txt) && echo "WROTE new.txt"`)
	if !strings.Contains(out, "WROTE new.txt") {
		t.Fatalf("control write in workspace-write failed: %s", out)
	}
}

// An outbound connection fails fast under --network none, while
// the same probe reaches a host listener from a container on the default
// bridge (so the attempt is real).
func TestNetworkDenied(t *testing.T) {
	b := liveBackend(t)
	ws := workspace(t)
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	// Control: from a default-bridge container the probe reaches the host
	// listener through the bridge gateway.
	ctl, err := exec.Command("docker", "run", "--rm", "--label", testenv.TestLabel+"=1", b.Image, "sh", "-c",
		fmt.Sprintf(`gw=$(ip route | awk '/default/ {print $3}'); echo "GW=$gw"; probe connect "$gw:%d" 3s`, port)).CombinedOutput()
	if err != nil || !strings.Contains(string(ctl), "OK connected") {
		t.Fatalf("control probe failed (%v): %s", err, ctl)
	}
	<-accepted
	gw, _, _ := strings.Cut(strings.TrimPrefix(strings.SplitN(string(ctl), "\n", 2)[0], "GW="), "\n")
	target := net.JoinHostPort(gw, fmt.Sprint(port))

	start := time.Now()
	out, _, code := run(t, b, sandbox.WorkspaceWrite, ws, "probe connect "+target+" 5s; probe connect 1.1.1.1:443 5s; probe resolve example.com")
	if code == 0 || strings.Contains(out, "OK") {
		t.Fatalf("network reachable under --network none: %s", out)
	}
	if !strings.Contains(out, "FAIL") {
		t.Fatalf("probe did not run: %q", out)
	}
	select {
	case <-accepted:
		t.Fatal("the host listener accepted a connection from the sandbox")
	default:
	}
	t.Logf("denied in %v: %s", time.Since(start), out)
}

func TestProbeCachesAndFailsClosed(t *testing.T) {
	testenv.RequireDocker(t)
	p := &Probe{}
	if err := p.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Version() == "" {
		t.Fatal("no version recorded")
	}
	// Cached: a dead DOCKER_HOST is not consulted within the TTL ...
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	if err := p.Check(context.Background()); err != nil {
		t.Fatalf("cached probe re-probed: %v", err)
	}
	// ... until invalidated, after which the failure is reported, not cached.
	p.Invalidate()
	err := p.Check(context.Background())
	if !errors.Is(err, engine.ErrDaemonUnavailable) || !strings.Contains(err.Error(), "/nonexistent/docker.sock") {
		t.Fatalf("dead daemon: %v", err)
	}
	os.Unsetenv("DOCKER_HOST")
	if err := p.Check(context.Background()); err != nil {
		t.Fatalf("failure was cached: %v", err)
	}
	// A missing CLI is unavailable, too.
	if err := (&Probe{Binary: "/nonexistent/docker"}).Check(context.Background()); !errors.Is(err, engine.ErrDaemonUnavailable) {
		t.Fatalf("missing CLI: %v", err)
	}
}

func TestProbePersistentCache(t *testing.T) {
	testenv.RequireDocker(t)
	dir := t.TempDir()
	t.Setenv("PATH_ORIG", os.Getenv("PATH"))
	if err := (&Probe{CacheDir: dir}).Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A fresh probe (another process) trusts the cached success without
	// running docker at all (it is not even on PATH) ...
	t.Setenv("PATH", t.TempDir())
	p := &Probe{CacheDir: dir}
	if err := p.Check(context.Background()); err != nil {
		t.Fatalf("persisted success not used: %v", err)
	}
	if p.Version() == "" {
		t.Fatal("version not restored from cache")
	}
	// ... but the cache is per daemon address: a dead DOCKER_HOST is probed.
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	if err := (&Probe{CacheDir: dir}).Check(context.Background()); !errors.Is(err, engine.ErrDaemonUnavailable) {
		t.Fatalf("cache leaked across DOCKER_HOST: %v", err)
	}
	os.Unsetenv("DOCKER_HOST")
	// Invalidate removes the persisted success.
	p.Invalidate()
	if err := p.Check(context.Background()); !errors.Is(err, engine.ErrDaemonUnavailable) {
		t.Fatalf("invalidated cache still trusted: %v", err)
	}
	// An expired entry is not trusted.
	t.Setenv("PATH", os.Getenv("PATH_ORIG"))
	if err := (&Probe{CacheDir: dir}).Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	if err := (&Probe{CacheDir: dir, TTL: time.Nanosecond}).Check(context.Background()); !errors.Is(err, engine.ErrDaemonUnavailable) {
		t.Fatalf("expired cache trusted: %v", err)
	}
}
