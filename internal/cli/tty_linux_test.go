package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"vak/internal/testenv"
)

// outerTerm is the user's terminal in these tests: a real pseudo-terminal
// whose slave is vak's stdin, stdout and stderr (and controlling terminal).
type outerTerm struct {
	master, slave *os.File
	mu            sync.Mutex
	out           bytes.Buffer
}

func newOuterTerm(t *testing.T) *outerTerm {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	o := &outerTerm{master: master, slave: slave}
	t.Cleanup(func() { master.Close(); slave.Close() })
	if err := pty.Setsize(master, &pty.Winsize{Rows: 30, Cols: 90}); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			o.mu.Lock()
			o.out.Write(buf[:n])
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return o
}

func (o *outerTerm) output() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.String()
}

// start runs vak on the terminal, as a shell would (new session, the
// terminal its controlling terminal).
func (o *outerTerm) start(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return o.startIn(t, o.slave, args...)
}

// startIn is start with stdin in place of the terminal.
func (o *outerTerm) startIn(t *testing.T, stdin io.Reader, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(workerExecutable, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, o.slave, o.slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 1}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func (o *outerTerm) waitOutput(t *testing.T, what string, re *regexp.Regexp) {
	t.Helper()
	waitFor(t, what+" (output so far: "+o.output()+")", func() bool { return re.MatchString(o.output()) })
}

func (o *outerTerm) termios(t *testing.T) *unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(o.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio
}

// pendingInput is how many bytes wait in the outer terminal's input queue
// (what TIOCSTI would have injected, unread by anyone: vak has exited).
func (o *outerTerm) pendingInput(t *testing.T) int {
	t.Helper()
	n, err := unix.IoctlGetInt(int(o.slave.Fd()), unix.TIOCINQ)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode()
}

// ttyBackends are the backends whose interactive runs the terminal tests
// drive: each returns the user config, or skips.
var ttyBackends = []struct {
	name   string
	docker bool
	config func(t *testing.T) string
}{
	{"landlock", false, func(t *testing.T) string {
		testenv.RequireLandlock(t)
		return writeConfig(t, "version = 1\n")
	}},
	{"docker", true, dockerConfig},
}

// TestRunTTY drives `vak run` through a real terminal, on the native
// backend and on docker: the command gets a terminal of its own inside the
// sandbox (on by default, as stdin and stdout are terminals), sees the size
// and its changes, reads typed input, gets Ctrl-C itself, its exit status
// is vak's, and the user's terminal mode is restored.
func TestRunTTY(t *testing.T) {
	for _, b := range ttyBackends {
		t.Run(b.name, func(t *testing.T) { testRunTTY(t, b.config(t), b.docker) })
	}
}

func testRunTTY(t *testing.T, cfg string, docker bool) {
	ws := tempWorkspace(t)
	o := newOuterTerm(t)
	before := o.termios(t)
	script := `tty; stty size; echo READY
while read x; do
  case "$x" in
  size) stty size ;;
  int) break ;;
  *) echo "got=$x" ;;
  esac
done
trap 'echo GOT""INT; exit 7' INT
echo ARMED
while :; do sleep 1; done`
	cmd := o.start(t, "--config", cfg, "run", "-w", ws, "--", "sh", "-c", script)
	o.waitOutput(t, "the command's terminal and size", regexp.MustCompile(`(?m)^/dev/pts/\d+\r?\n30 90\r?\nREADY`))

	// Control: while the command runs, the user's terminal is raw (so the
	// restore check below can fail).
	if during := o.termios(t); during.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Errorf("the outer terminal is not in raw mode while the command runs: lflag %#x", during.Lflag)
	}

	o.master.WriteString("hello\r")
	o.waitOutput(t, "the typed line", regexp.MustCompile(`got=hello`))

	if err := pty.Setsize(o.master, &pty.Winsize{Rows: 41, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	// The resize travels asynchronously (SIGWINCH to vak, a resize request
	// to the worker, on docker SIGWINCH to the docker CLI and a resize
	// request to the daemon): ask until the command sees it.
	waitFor(t, "the command to see the new size", func() bool {
		o.master.WriteString("size\r")
		time.Sleep(50 * time.Millisecond)
		return strings.Contains(o.output(), "41 101")
	})

	o.master.WriteString("int\r")
	o.waitOutput(t, "the INT trap", regexp.MustCompile(`ARMED`))
	o.master.Write([]byte{3}) // Ctrl-C
	o.waitOutput(t, "Ctrl-C to reach the command", regexp.MustCompile(`GOTINT`))
	if code := exitCode(t, cmd); code != 7 {
		t.Errorf("vak exited %d, want the command's 7; output:\n%s", code, o.output())
	}
	after := o.termios(t)
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag || after.Cflag != before.Cflag {
		t.Errorf("the outer terminal's mode was not restored: before %+v after %+v", before, after)
	}
	if docker {
		if l := leftovers(t, ws); l != "" {
			t.Errorf("containers left: %s", l)
		}
	}
}

// TestRunTTYNoInjection tries TIOCSTI from the sandboxed command on every
// terminal it could reach (its stdin, stdout, stderr and /dev/tty), with a
// terminal inside the sandbox and with -i only, on the native backend and
// on docker: nothing reaches the user's terminal. (On docker the command's
// terminal is the container's own, and injecting into it only feeds the
// command itself.) The same ioctl from a process that holds the user's
// terminal does inject (positive control).
func TestRunTTYNoInjection(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl for the native backend's ioctl")
	}
	perlInject := `for fd in 0 1 2; do perl -e 'open(my $t, "+<&=", $ARGV[0]) or die; ioctl($t, 0x5412, my $c = "Z") ? print "INJECTED fd $ARGV[0]\n" : print "refused fd $ARGV[0]: $!\n"' $fd; done
perl -e 'open(my $t, "+<", "/dev/tty") or do { print "no /dev/tty: $!\n"; exit }; ioctl($t, 0x5412, my $c = "Z") ? print "INJECTED tty\n" : print "refused tty: $!\n"'
echo DONE`
	// The test image has no perl: the static probe, from the workspace.
	probeInject := `for fd in 0 1 2; do ./probe attempt tiocsti <&$fd && echo "own terminal fd $fd" || echo "refused fd $fd"; done
./probe attempt tiocsti </dev/tty && echo "own terminal /dev/tty" || echo "refused /dev/tty"
echo DONE`
	for _, b := range ttyBackends {
		t.Run(b.name, func(t *testing.T) {
			cfg := b.config(t)
			ws := tempWorkspace(t)
			inject := perlInject
			if b.docker {
				data, err := os.ReadFile(probeBinary(t))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(ws+"/probe", data, 0o755); err != nil {
					t.Fatal(err)
				}
				inject = probeInject
			}
			testRunTTYNoInjection(t, cfg, ws, inject, b.docker)
		})
	}
}

func testRunTTYNoInjection(t *testing.T, cfg, ws, inject string, docker bool) {
	o := newOuterTerm(t)
	// Non-canonical, so that TIOCINQ counts an injected byte without a
	// line end.
	tio := o.termios(t)
	tio.Lflag &^= unix.ICANON
	if err := unix.IoctlSetTermios(int(o.slave.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	injectControl(t, o)

	for _, mode := range []string{"-t", "-i"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--config", cfg, "run", "-w", ws, mode}
			if mode == "-i" {
				args = append(args, "-t=false")
			}
			cmd := o.start(t, append(args, "--", "sh", "-c", inject)...)
			if code := exitCode(t, cmd); code != 0 {
				t.Fatalf("vak exited %d: %s", code, o.output())
			}
			// The terminal's output may still be on its way to the reader.
			o.waitOutput(t, "the end of the command's output", regexp.MustCompile(`DONE`))
			if strings.Contains(o.output(), "INJECTED") {
				t.Fatalf("output:\n%s", o.output())
			}
			if n := o.pendingInput(t); n != 0 {
				t.Fatalf("%d bytes were injected into the outer terminal; output:\n%s", n, o.output())
			}
		})
	}
	if docker {
		if l := leftovers(t, ws); l != "" {
			t.Errorf("containers left: %s", l)
		}
	}
	t.Logf("output:\n%s", o.output())
}

// TestRunStdin: -i streams stdin (more than a pipe buffer, in order) to the
// command and ends it with EOF; without -i (stdin no terminal) the command
// reads nothing. Native and docker.
func TestRunStdin(t *testing.T) {
	for _, b := range ttyBackends {
		t.Run(b.name, func(t *testing.T) {
			cfg := b.config(t)
			ws := tempWorkspace(t)
			data := strings.Repeat("0123456789abcdef\n", 20000) // 340 KB
			run := func(args ...string) (int, string) {
				cmd := exec.Command(workerExecutable, append([]string{"--config", cfg, "run", "-w", ws}, args...)...)
				cmd.Stdin = strings.NewReader(data)
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				cmd.Run()
				return cmd.ProcessState.ExitCode(), out.String()
			}
			code, out := run("-i", "--", "sh", "-c", "wc -c; echo end; exit 5")
			if f := strings.Fields(out); code != 5 || len(f) == 0 || f[0] != "340000" || !strings.Contains(out, "end") {
				t.Errorf("-i: exit %d, output %q", code, out)
			}
			code, out = run("--", "sh", "-c", "wc -c")
			if code != 0 || strings.TrimSpace(out) != "0" {
				t.Errorf("without -i: exit %d, output %q (want 0 bytes read)", code, out)
			}
			if b.docker {
				if l := leftovers(t, ws); l != "" {
					t.Errorf("containers left: %s", l)
				}
			}
		})
	}
}

// TestRunTTYDockerEnds: an interactive docker run ends with nothing left
// running however vak ends. SIGKILL (no cleanup runs in vak): the
// keeper's lifeline ends and it kills the command and ends the container.
// SIGTERM: vak tears the command down, exits 130 and restores the
// user's terminal. Control: the command was running in its container
// before the signal.
func TestRunTTYDockerEnds(t *testing.T) {
	cfg := dockerConfig(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			ws := tempWorkspace(t)
			o := newOuterTerm(t)
			before := o.termios(t)
			cmd := o.start(t, "--config", cfg, "run", "-w", ws, "-t", "--", "sh", "-c", "touch started; echo RUNNING; sleep 300")
			o.waitOutput(t, "the command to run", regexp.MustCompile(`RUNNING`))
			if _, err := os.Stat(ws + "/started"); err != nil || leftovers(t, ws) == "" {
				t.Fatalf("control: the command is not running in a container (%v)", err)
			}
			out, err := exec.Command("docker", "ps", "--filter", "label=vak.workspace="+ws, "--format", "{{.Names}}").Output()
			name := strings.TrimSpace(string(out))
			if err != nil || name == "" {
				t.Fatalf("docker ps: %v %q", err, out)
			}
			// The host side: the docker CLIs and the wrapper name the
			// workspace or the container.
			host := func() []int { return hostProcs(ws, name) }
			if !slices.ContainsFunc(host(), func(pid int) bool { return pid != cmd.Process.Pid }) {
				t.Fatal("control: no host process but vak names the run")
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			code := exitCode(t, cmd)
			waitFor(t, "the container to go", func() bool { return leftovers(t, ws) == "" })
			waitFor(t, "the host processes of the run to go", func() bool { return len(host()) == 0 })
			if sig == syscall.SIGKILL {
				return
			}
			if code != ExitInterrupted {
				t.Errorf("vak exited %d after SIGTERM, want %d; output:\n%s", code, ExitInterrupted, o.output())
			}
			after := o.termios(t)
			if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
				t.Errorf("the outer terminal's mode was not restored: before %+v after %+v", before, after)
			}
		})
	}
}

// hostProcs returns the pids of processes whose argv contains one of subs.
func hostProcs(subs ...string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		argv, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, s := range subs {
			if bytes.Contains(argv, []byte(s)) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// injectControl is the positive control of the TIOCSTI tests: a process
// holding the outer terminal o (non-canonical) injects into it. The
// injected byte is flushed again.
func injectControl(t *testing.T, o *outerTerm) {
	t.Helper()
	ctl := exec.Command(probeBinary(t), "attempt", "tiocsti")
	ctl.Stdin = o.slave
	// Its controlling terminal, as vak's is in the tests (TIOCSTI without
	// CAP_SYS_ADMIN needs that).
	ctl.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Skipf("control: TIOCSTI on the outer terminal fails here (%v: %s), nothing to defend", err, out)
	}
	if n := o.pendingInput(t); n != 1 {
		t.Fatalf("control: %d bytes pending after TIOCSTI, want 1", n)
	}
	unix.IoctlSetInt(int(o.slave.Fd()), unix.TCFLSH, unix.TCIFLUSH)
}

// probeBinary is the static probe (scripts/probe).
func probeBinary(t *testing.T) string { return testenv.Probe(t) }

// endOfInputCases are what the user's terminal holds when vak starts, as
// `script` leaves it when its own input has ended (it types ^D at once,
// before vak runs): the command's cat must end with status 0 and read what
// was typed before, intact (the control), and nothing turns into a NUL
// keystroke (which cat would read and then wait for ever).
var endOfInputCases = []struct{ name, typed, want string }{
	{"end only", "\x04", ""},
	{"line then end", "hello there\n\x04", "hello there"},
	{"unended line then end", "ab\x04\x04", "ab"},
}

// endOfInputScript reads its input to the end and reports it and cat's
// status; tty shows the terminal it reads first (a NUL typed into it
// would be echoed as ^@).
const endOfInputScript = `tty; x=$(cat); echo "got=[$x] rc=$?"`

// checkEndOfInput waits for endOfInputScript's report of want and checks
// vak's exit status, that no NUL was typed, and that the outer terminal's
// mode is before's again (its end-of-file character included, which vak
// turns off for a moment).
func checkEndOfInput(t *testing.T, o *outerTerm, cmd *exec.Cmd, want string, before *unix.Termios) {
	t.Helper()
	o.waitOutput(t, "the command's input to end", regexp.MustCompile(`got=\[.*\] rc=\d+`))
	if code := exitCode(t, cmd); code != 0 {
		t.Errorf("vak exited %d; output:\n%q", code, o.output())
	}
	if after := o.termios(t); *after != *before {
		t.Errorf("the outer terminal's mode was not restored: before %+v after %+v", before, after)
	}
	out := strings.ReplaceAll(o.output(), "\r", "")
	if !strings.Contains(out, "got=["+want+"] rc=0") {
		t.Errorf("want got=[%s] rc=0; output:\n%q", want, out)
	}
	if strings.Contains(out, "^@") || strings.Contains(out, "\x00") {
		t.Errorf("a NUL reached the command; output:\n%q", out)
	}
}

// TestRunTTYEndOfInput: on the native backend and on docker, the end of
// the user's terminal input reaches a -t command as end of input, also
// when it ended before vak started (endOfInputCases), and so does the end
// of a stdin that is no terminal, after a line not ended (the command's
// terminal then gets its end-of-file character twice).
func TestRunTTYEndOfInput(t *testing.T) {
	eachTTYBackend(t, func(t *testing.T, args []string) {
		for _, c := range endOfInputCases {
			t.Run(c.name, func(t *testing.T) {
				o := newOuterTerm(t)
				before := o.termios(t)
				o.master.WriteString(c.typed)
				cmd := o.start(t, append(args, "--", "sh", "-c", endOfInputScript)...)
				checkEndOfInput(t, o, cmd, c.want, before)
			})
		}
		t.Run("stdin a pipe", func(t *testing.T) {
			o := newOuterTerm(t)
			before := o.termios(t)
			cmd := o.startIn(t, strings.NewReader("no newline"), append(args, "-t", "--", "sh", "-c", endOfInputScript)...)
			checkEndOfInput(t, o, cmd, "no newline", before)
		})
	})
}

// eachTTYBackend runs f for each of ttyBackends with the arguments of a
// labelled `vak run` in a fresh workspace, and checks that a docker run
// left no container.
func eachTTYBackend(t *testing.T, f func(t *testing.T, args []string)) {
	for _, b := range ttyBackends {
		t.Run(b.name, func(t *testing.T) {
			ws := tempWorkspace(t)
			f(t, []string{"--config", b.config(t), "run", "--label", "vak.test=1", "-w", ws})
			if b.docker {
				if l := leftovers(t, ws); l != "" {
					t.Errorf("containers left: %s", l)
				}
			}
		})
	}
}

// TestRunTTYToolLeavesTerminal: a tool that an interactive agent runs can
// leave the agent's terminal as it would outside, on the native backend
// too (setsid is allowed in the sandbox; its session is still killed with
// the command's, see TimeoutKillsProcessTree in sandboxtest): in a session
// of its own it has no controlling terminal, so /dev/tty fails with ENXIO
// ("No such device or address") and a prompt there fails at once instead
// of reading the agent's keys. Control: the same tool in the agent's
// session reaches the terminal (its size).
func TestRunTTYToolLeavesTerminal(t *testing.T) {
	eachTTYBackend(t, func(t *testing.T, args []string) {
		o := newOuterTerm(t)
		agent := `stty size </dev/tty && echo IN-SESSION-OK
setsid sh -c 'stty size </dev/tty; echo "left=$?"'
echo setsid=$?`
		cmd := o.start(t, append(args, "--", "sh", "-c", agent)...)
		o.waitOutput(t, "the tool's outcome", regexp.MustCompile(`setsid=\d+`))
		if code := exitCode(t, cmd); code != 0 {
			t.Errorf("vak exited %d", code)
		}
		out := strings.ReplaceAll(o.output(), "\r", "")
		if !strings.Contains(out, "30 90\nIN-SESSION-OK") {
			t.Fatalf("control: the tool in the agent's session did not reach its terminal:\n%s", out)
		}
		if !strings.Contains(out, "No such device or address") || regexp.MustCompile(`left=0\b`).MatchString(out) || !strings.Contains(out, "setsid=0") {
			t.Errorf("the tool that left the session still reached the terminal, or could not leave:\n%s", out)
		}
	})
}
