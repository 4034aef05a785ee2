package landlock

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// notifyHelperEnv makes the test binary the supervised process of
// TestSupervise (notifyHelper) instead of running tests.
const notifyHelperEnv = "VAK_TEST_NOTIFY_HELPER"

// TestNotifyHelper is not a test: run by TestSupervise as a child process,
// it is notifyHelper.
func TestNotifyHelper(t *testing.T) {
	if os.Getenv(notifyHelperEnv) != "1" {
		t.Skip("the supervised process of TestSupervise")
	}
	err := notifyHelper()
	if err != nil {
		fmt.Println("helper:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

// notifyHelper is what stage 2 does about setsid, without the rest of the
// sandbox: it loads a filter that turns setsid into a user notification,
// hands the listener to its supervisor (fd 4, handOver), starts a child as
// a session leader (a direct child: a command) and calls setsid itself (as
// a command's descendant would: allowed, and recorded as a session made
// from the one it leaves), then asks the supervisor for the sessions of
// the session it left (its own new one is among them) and of its own (only
// itself). It prints the outcomes and exits, and so does the child: then
// nothing uses the filter any more.
func notifyHelper() error {
	lineage, err := NotifySetsid()
	if err != nil {
		return err
	}
	child := exec.Command("/bin/true")
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	fmt.Printf("child setsid: %v\n", child.Run())
	left, err := unix.Getsid(0)
	if err != nil {
		return err
	}
	_, err = unix.Setsid()
	fmt.Printf("own setsid: %v\n", err)
	from, err := lineage.Sessions(left)
	fmt.Printf("sessions of the one left: %v %v\n", slices.Contains(from, os.Getpid()) && slices.Contains(from, left), err)
	own, err := lineage.Sessions(os.Getpid())
	fmt.Printf("sessions of its own: %v %v\n", own, err)
	return nil
}

// The supervisor answers a supervised process's setsid notifications
// (its direct child starts a command's session; its own call is allowed
// and recorded as made from the session it left, which the supervisor
// then names among that session's when asked), sets the synchronous wake-up on the
// listener where the kernel has it (Linux 6.6; the flag cannot be read
// back, so the test sees the ioctl Supervise makes succeed), and returns
// once no process uses the filter any more: a broker that supervises a
// worker without namespaces keeps no thread spinning on the listener
// (Linux 6.18 answers its RECV with ENOENT at once then) or blocked in it
// for the rest of its life.
func TestSupervise(t *testing.T) {
	if err := unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		t.Skipf("no seccomp: %v", err)
	}
	syncWanted := kernelAtLeast(6, 6)
	for _, tc := range []struct {
		name  string
		serve func(t *testing.T, local *os.File, pid int)
	}{
		{"Supervise", func(t *testing.T, local *os.File, pid int) { Supervise(local, pid) }},
		{"its steps, checking the wake-up flag", func(t *testing.T, local *os.File, pid int) {
			fd, ok := receiveListener(local)
			if !ok {
				t.Error("no listener received")
				return
			}
			defer unix.Close(fd)
			err := syncWakeUp(fd)
			switch {
			case syncWanted && err != nil:
				t.Errorf("Linux 6.6 or newer refused the synchronous wake-up: %v", err)
			case !syncWanted && !errors.Is(err, unix.EINVAL):
				t.Errorf("a kernel before 6.6 answered %v to the synchronous wake-up, want EINVAL", err)
			}
			newSupervisor(fd, int(local.Fd()), pid).serve()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local, remote, err := SupervisorPair()
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			cmd := exec.Command(os.Args[0], "-test.run=^TestNotifyHelper$")
			cmd.Env = append(os.Environ(), notifyHelperEnv+"=1")
			cmd.ExtraFiles = []*os.File{nil, remote} // remote is SupervisorFD
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			remote.Close()
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				tc.serve(t, local, cmd.Process.Pid)
			}()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("helper: %v\n%s", err, out.String())
			}
			want := []string{"child setsid: <nil>", "own setsid: <nil>", "sessions of the one left: true <nil>", fmt.Sprintf("sessions of its own: [%d] <nil>", cmd.Process.Pid)}
			for _, want := range want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("helper output lacks %q:\n%s", want, out.String())
				}
			}
			// The helper and its child are gone (and reaped): the filter
			// has no user left. Not a timing assertion: the bound only
			// turns a supervisor that never returns into a failure.
			select {
			case <-returned:
			case <-time.After(time.Minute):
				t.Fatal("the supervisor still runs a minute after every process using the filter exited")
			}
		})
	}
}

// When the worker's end of the question socket goes away while the filter
// still has users, the supervisor stops polling the socket instead of
// finding it readable (at its end) on every poll and spinning on it: a
// benchmark's floor server that dropped its Lineage kept two supervisors
// at full speed for as long as it ran. A question asked before is
// answered (the positive control), and the supervisor still ends when the
// listener hangs up. The listener here is a pipe's read end: never
// readable while its writer is open, hung up once it is closed.
func TestSuperviseAskerGone(t *testing.T) {
	lr, lw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Close()
	defer lw.Close()
	local, remote, err := SupervisorPair()
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	// newLineage owns the descriptor it is given, as it owns
	// SupervisorFD in stage 2: a duplicate, so that remote's own close
	// cannot close it again later.
	fd, err := unix.Dup(int(remote.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	remote.Close()
	lineage, err := newLineage(fd)
	if err != nil {
		t.Fatal(err)
	}
	s := newSupervisor(int(lr.Fd()), int(local.Fd()), 1)
	pfd := s.pollFDs()

	type answer struct {
		sids []int
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		sids, err := lineage.Sessions(4242)
		answered <- answer{sids, err}
	}()
	if !s.step(pfd) {
		t.Fatal("the supervisor stopped at a question")
	}
	if a := <-answered; a.err != nil || !slices.Equal(a.sids, []int{4242}) {
		t.Fatalf("answer %v, %v; want [4242]", a.sids, a.err)
	}
	if pfd[1].Fd < 0 {
		t.Fatal("the question socket was dropped while the worker could still ask")
	}

	lineage.f.Close()
	if !s.step(pfd) {
		t.Fatal("the supervisor stopped when the worker went away; the listener is still open")
	}
	if pfd[1].Fd >= 0 {
		t.Fatal("the question socket is still polled after the worker closed its end: every poll returns at once")
	}

	lw.Close()
	if s.step(pfd) {
		t.Fatal("the supervisor went on after the listener hung up")
	}
}
