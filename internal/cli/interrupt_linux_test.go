package cli

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// interruptScripts are the commands of the interrupt tests. Each carries a
// marker (its own argv names it on the host, inside the sandbox or not),
// so that what is left of it can be found.
func interruptScripts(marker string) (traps, ignores string) {
	traps = `trap "echo got-int; exit 7" INT; echo ready; while :; do sleep 0.1; done; : ` + marker
	ignores = `trap "" INT; echo ready; while :; do sleep 0.1; done; : ` + marker
	return traps, ignores
}

// interruptible is a vak process of an interrupt test: stdin a pipe that
// stays open (-i without a terminal), output collected.
type interruptible struct {
	cmd *exec.Cmd
	out *lockedBuffer
}

func startInterruptible(t *testing.T, args ...string) *interruptible {
	t.Helper()
	cmd := exec.Command(workerExecutable, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &lockedBuffer{}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pr, out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	t.Cleanup(func() { pw.Close(); cmd.Process.Kill(); cmd.Wait() })
	return &interruptible{cmd: cmd, out: out}
}

func (p *interruptible) waitOutput(t *testing.T, what string) {
	t.Helper()
	waitFor(t, what+" in the output (so far: "+strconv.Quote(p.out.String())+")", func() bool { return strings.Contains(p.out.String(), what) })
}

func (p *interruptible) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// others are the processes whose argv holds marker, but vak itself.
func (p *interruptible) others(marker string) []int {
	return slices.DeleteFunc(hostProcs(marker), func(pid int) bool { return pid == p.cmd.Process.Pid })
}

// exit waits for vak (a hang fails after a generous bound).
func (p *interruptible) exit(t *testing.T) int {
	t.Helper()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("vak did not exit; output so far: %q", p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// checkInterrupts runs the three cases of the rule "Ctrl-C reaches the
// command, not vak; a second Ctrl-C or SIGTERM tears down" with start,
// which starts vak running a shell script with -i (stdin not a terminal):
//   - the first SIGINT vak gets reaches the command, which traps it: it
//     prints got-int, and its exit status 7 is vak's;
//   - a command that ignores SIGINT keeps running after the first (vak
//     says how to stop it), and the second tears it down: vak exits 130
//     and no process of the command is left;
//   - SIGTERM tears down at once: the trap never runs, vak exits 130.
//
// gone, if set, checks that the run left nothing else (containers).
func checkInterrupts(t *testing.T, start func(t *testing.T, script string) *interruptible, gone func(t *testing.T)) {
	marker := "vak-interrupt-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	traps, ignores := interruptScripts(marker)
	left := func(t *testing.T) {
		t.Helper()
		waitFor(t, "the command's processes to go", func() bool { return len(hostProcs(marker)) == 0 })
		if gone != nil {
			gone(t)
		}
	}
	t.Run("first SIGINT reaches the command", func(t *testing.T) {
		p := start(t, traps)
		p.waitOutput(t, "ready")
		// Control: the command runs (its processes carry the marker).
		if len(p.others(marker)) == 0 {
			t.Fatal("control: no process of the command runs")
		}
		p.signal(t, syscall.SIGINT)
		if code := p.exit(t); code != 7 || !strings.Contains(p.out.String(), "got-int") {
			t.Errorf("after one SIGINT: exit %d, output %q; want the command's trap (got-int) and its status 7", code, p.out.String())
		}
		if strings.Contains(p.out.String(), "interrupted") {
			t.Errorf("vak tore down after one SIGINT: %q", p.out.String())
		}
		left(t)
	})
	t.Run("second SIGINT tears down", func(t *testing.T) {
		p := start(t, ignores)
		p.waitOutput(t, "ready")
		p.signal(t, syscall.SIGINT)
		// The command ignores it and runs on; vak says so once.
		p.waitOutput(t, "press Ctrl-C again")
		if len(p.others(marker)) == 0 {
			t.Fatalf("the first SIGINT ended the run of a command that ignores it: %q", p.out.String())
		}
		p.signal(t, syscall.SIGINT)
		if code := p.exit(t); code != ExitInterrupted {
			t.Errorf("after a second SIGINT: exit %d, want %d; output %q", code, ExitInterrupted, p.out.String())
		}
		left(t)
	})
	t.Run("SIGTERM tears down at once", func(t *testing.T) {
		p := start(t, traps)
		p.waitOutput(t, "ready")
		p.signal(t, syscall.SIGTERM)
		if code := p.exit(t); code != ExitInterrupted || strings.Contains(p.out.String(), "got-int") {
			t.Errorf("after SIGTERM: exit %d, output %q; want %d and no trap", code, p.out.String(), ExitInterrupted)
		}
		left(t)
	})
}

// TestRunInterruptForwarded: `vak run -i` (stdin a pipe, no terminal)
// forwards the first SIGINT to the command; a second SIGINT or a SIGTERM
// tears the run down, leaving nothing. Native and docker (where `docker
// exec` forwards no signal: the wrapper does, into the container).
func TestRunInterruptForwarded(t *testing.T) {
	for _, b := range ttyBackends {
		t.Run(b.name, func(t *testing.T) {
			cfg := b.config(t)
			ws := tempWorkspace(t)
			var gone func(t *testing.T)
			if b.docker {
				gone = func(t *testing.T) {
					waitFor(t, "the run's container to go", func() bool { return leftovers(t, ws) == "" })
				}
			}
			checkInterrupts(t, func(t *testing.T, script string) *interruptible {
				return startInterruptible(t, "--config", cfg, "run", "-w", ws, "--label", "vak.test=1", "-i", "--", "sh", "-c", script)
			}, gone)
		})
	}
}

// TestSessionExecInterruptForwarded: `vak session exec -i` forwards the
// first SIGINT to the command in the session container; a second SIGINT or
// a SIGTERM kills the command (the session lives on: a command runs in it
// afterwards). Through the session's worker, and with --root (docker exec,
// which forwards no signal: vak delivers them in the container).
func TestSessionExecInterruptForwarded(t *testing.T) {
	cfg, labels, id := installSession(t, "--task", "intr")
	for _, tc := range []struct {
		name  string
		flags []string
	}{{"worker", []string{"-i"}}, {"root", []string{"-i", "--root"}}} {
		t.Run(tc.name, func(t *testing.T) {
			checkInterrupts(t, func(t *testing.T, script string) *interruptible {
				args := append(append([]string{"--config", cfg, "session", "exec"}, labels...), tc.flags...)
				return startInterruptible(t, append(args, id, "--", "sh", "-c", script)...)
			}, func(t *testing.T) {
				if code, out, errs := session(t, cfg, labels, "", "exec", id, "--", "echo", "alive"); code != 0 || out != "alive\n" {
					t.Errorf("the session after the command: exit %d, %q %q", code, out, errs)
				}
			})
		})
	}
}

// TestSessionExecRootStreams: `exec -i --root` (docker exec without a
// terminal) behaves like `exec -i` through the worker: stdin streams to
// the command until EOF, the command's exit status is vak's, without -i
// the command reads EOF at once, and --timeout kills it (status 124,
// nothing of it left in the container).
func TestSessionExecRootStreams(t *testing.T) {
	cfg, labels, id := installSession(t)
	for _, root := range []bool{false, true} {
		flags := []string{"-i"}
		if root {
			flags = append(flags, "--root")
		}
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			args := append(slices.Clone(flags), id, "--", "sh", "-c", "id -u; cat; echo eof; exit 3")
			code, out, errs := session(t, cfg, labels, "line one\nline two\n", "exec", args...)
			wantUID := strconv.Itoa(os.Getuid())
			if root {
				wantUID = "0"
			}
			if want := wantUID + "\nline one\nline two\neof\n"; code != 3 || out != want {
				t.Errorf("exec %v: exit %d, %q (want 3, %q); stderr %q", flags, code, out, want, errs)
			}
		})
	}
	// Without -i the command's stdin is empty, even with input at hand.
	if code, out, errs := session(t, cfg, labels, "not for the command\n", "exec", "--root", id, "--", "sh", "-c", "cat; echo eof"); code != 0 || out != "eof\n" {
		t.Errorf("exec --root without -i: exit %d, %q %q", code, out, errs)
	}
	marker := "vak-root-timeout-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	code, out, errs := session(t, cfg, labels, "", "exec", "--root", "--timeout", "2s", id, "--", "sh", "-c", "sleep 600; : "+marker)
	if code != ExitTimeout {
		t.Errorf("exec --root --timeout: exit %d, %q %q; want %d", code, out, errs, ExitTimeout)
	}
	waitFor(t, "the timed-out command's processes to go", func() bool { return len(hostProcs(marker)) == 0 })
}
