package agentnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// brokerDirEnv makes the test binary a broker (TestMain): Ensure's tests
// start it as the real, detached broker process. brokerPoliciesEnv lists
// the workspaces (separated by os.PathListSeparator) it has an enabled
// policy for, with no peers.
const (
	brokerDirEnv      = "VAK_AGENTNET_TEST_BROKER_DIR"
	brokerPoliciesEnv = "VAK_AGENTNET_TEST_BROKER_POLICIES"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(brokerDirEnv); dir != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		var ps []Policy
		for _, ws := range filepath.SplitList(os.Getenv(brokerPoliciesEnv)) {
			ps = append(ps, Policy{Workspace: ws, Enabled: true})
		}
		err := Run(ctx, RunOptions{Dir: dir, UID: os.Getuid(), Policies: func() ([]Policy, error) { return ps, nil }})
		if err != nil {
			os.Stderr.WriteString("test broker: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// brokerDir is a short state dir (unix socket paths are limited).
func brokerDir(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("peer credentials are implemented on Linux only")
	}
	d, err := os.MkdirTemp("", "anst")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(d, "agentnet")
	t.Cleanup(func() {
		stopBroker(t, dir)
		os.RemoveAll(d)
	})
	return dir
}

// brokerCommand counts the brokers it starts; the broker has an enabled
// policy for each of workspaces.
func brokerCommand(dir string, n *atomic.Int32, workspaces ...string) func() (*exec.Cmd, error) {
	return func() (*exec.Cmd, error) {
		n.Add(1)
		exe, err := os.Executable() // absolute: the broker runs in its state dir
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), brokerDirEnv+"="+dir, brokerPoliciesEnv+"="+strings.Join(workspaces, string(os.PathListSeparator)))
		return cmd, nil
	}
}

// brokerPID is the running broker's pid from its pid file.
func brokerPID(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(PIDFile(dir))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// stopBroker ends the broker this test started (by its pid) and waits
// until its socket stops answering.
func stopBroker(t *testing.T, dir string) {
	data, err := os.ReadFile(PIDFile(dir))
	if err != nil {
		return
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if pid <= 0 {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	waitUntil(t, "the broker stops", func() bool { return syscall.Kill(pid, 0) != nil })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEnsureConcurrentStartersOneBroker: eight clients that find no broker
// call Ensure at once; exactly one starts a broker (one command run, one
// "started"), every one of them gets an answering socket, and the broker
// runs in its own session (detached from the starters' process group).
func TestEnsureConcurrentStartersOneBroker(t *testing.T) {
	dir := brokerDir(t)
	var n atomic.Int32
	var started atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Ensure(context.Background(), dir, brokerCommand(dir, &n))
			if s {
				started.Add(1)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n.Load() != 1 || started.Load() != 1 {
		t.Fatalf("%d broker commands run, %d starters report a start; want 1 and 1", n.Load(), started.Load())
	}
	if err := NewClient(dir).Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := brokerPID(t, dir)
	sid, err := unix.Getsid(pid)
	if err != nil || sid != pid {
		t.Fatalf("broker pid %d: session %d (%v); want a session of its own", pid, sid, err)
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || cwd != dir {
		t.Fatalf("broker working directory %q (%v), want %s", cwd, err, dir)
	}
	// Its descriptors: stdin /dev/null, stdout and stderr the log.
	for fd, want := range map[int]string{0: "/dev/null", 1: LogFile(dir), 2: LogFile(dir)} {
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); err != nil || got != want {
			t.Fatalf("broker fd %d is %q (%v), want %s", fd, got, err, want)
		}
	}
	// Once it answers, Ensure starts nothing.
	if s, err := Ensure(context.Background(), dir, brokerCommand(dir, &n)); err != nil || s || n.Load() != 1 {
		t.Fatalf("Ensure with a live broker: started=%v err=%v commands=%d", s, err, n.Load())
	}
	// A second broker for the same dir refuses to start (the broker lock).
	if _, err := Listen(dir); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Listen while a broker runs: %v", err)
	}
	if st, err := os.Stat(LogFile(dir)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("broker log: %v %v", st, err)
	}
}

// TestEnsureReplacesStaleSocketAndClientsReconnect: a socket file no one
// listens on (a broker that died) does not stop Ensure; after the broker
// is killed (SIGKILL: nothing cleaned up), the next Ensure starts a new one
// and a client whose pooled connections went to the dead broker gets
// answers from the new one without being recreated.
func TestEnsureReplacesStaleSocketAndClientsReconnect(t *testing.T) {
	dir := brokerDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	c := NewClient(dir)
	defer c.Close()
	if err := c.Ping(context.Background()); err == nil {
		t.Fatal("control: a closed socket answered")
	}
	var n atomic.Int32
	if s, err := Ensure(context.Background(), dir, brokerCommand(dir, &n)); err != nil || !s {
		t.Fatalf("Ensure over a stale socket: started=%v %v", s, err)
	}
	// Two concurrent calls leave two pooled connections to this broker.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); c.Ping(context.Background()) }()
	}
	wg.Wait()
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	pid := brokerPID(t, dir)
	syscall.Kill(pid, syscall.SIGKILL)
	waitUntil(t, "the killed broker is gone", func() bool { return c.Ping(context.Background()) != nil })
	if s, err := Ensure(context.Background(), dir, brokerCommand(dir, &n)); err != nil || !s || n.Load() != 2 {
		t.Fatalf("Ensure after the broker was killed: started=%v err=%v commands=%d", s, err, n.Load())
	}
	if brokerPID(t, dir) == pid {
		t.Fatal("the pid file still names the killed broker")
	}
	for range 3 {
		if err := c.Ping(context.Background()); err != nil {
			t.Fatalf("the old client does not reach the new broker: %v", err)
		}
	}
}

// TestEnsureBrokerFailsToStart: a broker that exits at once is reported
// with its log, not waited for until the timeout.
func TestEnsureBrokerFailsToStart(t *testing.T) {
	dir := brokerDir(t)
	_, err := Ensure(context.Background(), dir, func() (*exec.Cmd, error) {
		return exec.Command("/bin/sh", "-c", "echo 'config: bad key x' >&2; exit 3"), nil
	})
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "bad key x") || !strings.Contains(err.Error(), LogFile(dir)) {
		t.Fatalf("Ensure with a failing broker: %v", err)
	}
	// A relative program path is the starter's, not the state dir's.
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "broker.sh"), []byte("#!/bin/sh\necho 'ran from a relative path' >&2; exit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(bin)
	_, err = Ensure(context.Background(), dir, func() (*exec.Cmd, error) { return exec.Command("./broker.sh"), nil })
	if err == nil || !strings.Contains(err.Error(), "ran from a relative path") {
		t.Fatalf("Ensure with a relative program path: %v", err)
	}
	_, err = Ensure(context.Background(), dir, func() (*exec.Cmd, error) { return nil, errors.New("no vak binary") })
	if err == nil || !strings.Contains(err.Error(), "no vak binary") {
		t.Fatalf("Ensure whose command fails: %v", err)
	}
}
