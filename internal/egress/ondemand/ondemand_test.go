package ondemand

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// commandEnv is command with the secret's variable set to value in the
// gateway's environment, as a run with that value in its own would start
// it.
func commandEnv(t *testing.T, xdg, body, value string) func(Paths) *exec.Cmd {
	t.Helper()
	c := command(t, xdg, body, "1h")
	return func(p Paths) *exec.Cmd {
		cmd := c(p)
		cmd.Env = append(cmd.Env, envKey+"="+value)
		return cmd
	}
}

const envKey = "VAKTEST_ONDEMAND_KEY"

func environOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSecretEnvChange: a run whose environment holds another value of an
// env-sourced secret than the running gateway got restarts the gateway when
// no other run uses it (the new gateway has the new value), and otherwise
// keeps it and warns, naming the variable but no value. The stamp holds no
// value either. Control: the same value reuses the gateway, no warning.
func TestSecretEnvChange(t *testing.T) {
	xdg := t.TempDir()
	state := filepath.Join(xdg, "vak")
	ctx := context.Background()
	t.Cleanup(func() { Stop(ctx, state) })
	body := config + "[secrets.KEY]\nenv = \"" + envKey + "\"\nhosts = [\"a.test\"]\n"
	const v1, v2 = "sk-first-0123456789abcdef", "sk-second-fedcba9876543210"
	acquire := func(v string) *Lease {
		t.Helper()
		l, err := Acquire(ctx, Options{StateDir: state, SecretEnv: map[string]string{envKey: v}, Command: commandEnv(t, xdg, body, v)})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	p := Layout(state)
	l1 := acquire(v1)
	pid1 := pidOf(t, p)
	if !strings.Contains(environOf(t, pid1), v1) {
		t.Fatal("the gateway did not get the first value (the test proves nothing)")
	}
	if l1.Warning != "" {
		t.Fatalf("first run warned: %s", l1.Warning)
	}
	// Control: same value, same gateway, no warning.
	l2 := acquire(v1)
	if pidOf(t, p) != pid1 || l2.Warning != "" {
		t.Fatalf("same value: pid %d (was %d), warning %q", pidOf(t, p), pid1, l2.Warning)
	}
	l2.Release()
	// Another value while l1 holds the gateway: kept, with a warning.
	l3 := acquire(v2)
	if pidOf(t, p) != pid1 {
		t.Fatal("the gateway was restarted under a run that uses it")
	}
	if !strings.Contains(l3.Warning, envKey) || strings.Contains(l3.Warning, v1) || strings.Contains(l3.Warning, v2) {
		t.Fatalf("warning should name %s and no value: %q", envKey, l3.Warning)
	}
	l3.Release()
	l1.Release()
	stamp := readFile(t, p.EnvStamp)
	if strings.Contains(stamp, v1) || strings.Contains(stamp, v2) || !strings.Contains(stamp, envKey) {
		t.Fatalf("stamp holds a value or lacks the name:\n%s", stamp)
	}
	// Nobody uses it now: the new value restarts it.
	l4 := acquire(v2)
	defer l4.Release()
	pid4 := pidOf(t, p)
	if pid4 == pid1 || l4.Warning != "" {
		t.Fatalf("not restarted for the new value: pid %d (was %d), warning %q", pid4, pid1, l4.Warning)
	}
	if env := environOf(t, pid4); !strings.Contains(env, v2) || strings.Contains(env, v1) {
		t.Fatal("the restarted gateway does not hold the new value")
	}
	waitFor(t, "the old gateway to exit", func() bool { return syscall.Kill(pid1, 0) != nil })
}
