package ondemand

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vak/internal/errclass"
	"vak/internal/testenv"
)

// command returns a Command running the real `vak gateway serve-native`
// with the config body and idle time, its state in xdg.
func command(t *testing.T, xdg, body, idle string) func(Paths) *exec.Cmd {
	t.Helper()
	vak := testenv.Vak(t)
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(Paths) *exec.Cmd {
		cmd := exec.Command(vak, "--config", cfg, "gateway", "serve-native", "--idle", idle)
		cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+xdg)
		return cmd
	}
}

const config = "version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nhosts = [\"a.test\"]\n"

func pidOf(t *testing.T, p Paths) int {
	t.Helper()
	b, err := os.ReadFile(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, c := range strings.TrimSpace(string(b)) {
		pid = pid*10 + int(c-'0')
	}
	return pid
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLifecycle: concurrent first runs start one gateway and share it; it
// outlives its idle time while a run holds it, and Stop refuses then; it
// stops by itself once released; the next run starts a new one; Stop stops
// an unused one.
func TestLifecycle(t *testing.T) {
	xdg := t.TempDir()
	state := filepath.Join(xdg, "vak")
	ctx := context.Background()
	o := Options{StateDir: state, Command: command(t, xdg, config, "300ms")}
	t.Cleanup(func() { Stop(ctx, state) })
	var wg sync.WaitGroup
	leases := make([]*Lease, 3)
	errs := make([]error, 3)
	for i := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = Acquire(ctx, o)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
	}
	p := Layout(state)
	pid := pidOf(t, p)
	for i, l := range leases {
		if string(l.CACert) != string(leases[0].CACert) || !strings.Contains(string(l.CACert), "CERTIFICATE") {
			t.Fatalf("lease %d got another CA", i)
		}
	}
	if n := strings.Count(readFile(t, p.Log), "on-demand session"); n != 1 {
		t.Fatalf("%d gateways started for concurrent runs, want 1:\n%s", n, readFile(t, p.Log))
	}
	for _, f := range []string{p.Admin, p.Data, p.DNS} {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want a 0600 socket", f, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(p.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, want 0700", p.Dir, err)
	}
	// Held: still there after several idle periods, and Stop refuses.
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			t.Fatal("the gateway stopped while runs held it")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := Stop(ctx, state); !errors.Is(err, ErrInUse) {
		t.Fatalf("Stop while held: %v, want ErrInUse", err)
	}
	for _, l := range leases {
		l.Release()
	}
	waitFor(t, "the idle gateway to stop", func() bool { return syscall.Kill(pid, 0) != nil })
	if !strings.Contains(readFile(t, p.Log), "stopping") {
		t.Fatalf("log does not say it stopped for idleness:\n%s", readFile(t, p.Log))
	}
	// The next run starts a new one; Stop stops it when unused.
	l, err := Acquire(ctx, Options{StateDir: state, Command: command(t, xdg, config, "1h")})
	if err != nil {
		t.Fatal(err)
	}
	pid2 := pidOf(t, p)
	if pid2 == pid {
		t.Fatal("no new gateway")
	}
	l.Release()
	stopped, err := Stop(ctx, state)
	if err != nil || !stopped {
		t.Fatalf("Stop: %v %v", stopped, err)
	}
	waitFor(t, "the stopped gateway to exit", func() bool { return syscall.Kill(pid2, 0) != nil })
}

// TestAcquireUnavailable: a gateway that cannot start is ErrUnavailable
// (class unavailable: exit 69), naming the cause from its log, and leaves
// no lease behind.
func TestAcquireUnavailable(t *testing.T) {
	xdg := t.TempDir()
	state := filepath.Join(xdg, "vak")
	bad := config + "[gateway]\nextra_ca_bundles = [\"/nonexistent/vak-test-ca.pem\"]\n"
	_, err := Acquire(context.Background(), Options{StateDir: state, Command: command(t, xdg, bad, "1h")})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errclass.Unavailable) || !strings.Contains(err.Error(), "vak-test-ca.pem") {
		t.Fatalf("got %v, want ErrUnavailable naming the bundle", err)
	}
	// Control: the same state starts with a valid config.
	l, err := Acquire(context.Background(), Options{StateDir: state, Command: command(t, xdg, config, "1h")})
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	l.Release()
	if stopped, err := Stop(context.Background(), state); err != nil || !stopped {
		t.Fatalf("stop: %v %v (was a lease left behind?)", stopped, err)
	}
}

func readFile(t *testing.T, f string) string {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
