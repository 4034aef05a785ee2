package cli

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// TestSessionExecTTY drives `vak session exec -t` through a real terminal:
// the command sees the same environment as without -t (but TERM, which a
// terminal sets), a terminal of the container with the user's size and its
// changes, typed input, Ctrl-C itself; vak exits with the command's status
// and the user's terminal mode is restored. TIOCSTI from the command on
// every terminal it can reach only feeds its own terminal: nothing is
// injected into the user's (control: the same ioctl from a process that
// holds the user's terminal injects).
func TestSessionExecTTY(t *testing.T) {
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	id := createSession(t, cfg, labels, ws, "tty")
	// Through sh -c, as the -t command below (sh counts SHLVL).
	code, plainEnv, errs := session(t, cfg, labels, "", "exec", id, "--", "sh", "-c", "env")
	if code != 0 {
		t.Fatalf("exec env: %d %s", code, errs)
	}
	vak := func(_ *outerTerm, args ...string) []string {
		return append(append([]string{"--config", cfg, "session", "exec"}, labels...), args...)
	}

	t.Run("terminal", func(t *testing.T) {
		o := newOuterTerm(t)
		before := o.termios(t)
		script := `env; echo ENV""END; tty; stty size; echo READY
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
		cmd := o.start(t, vak(o, "-t", id, "--", "sh", "-c", script)...)
		o.waitOutput(t, "the command's terminal and size", regexp.MustCompile(`(?m)^/dev/pts/\d+\r?\n30 90\r?\nREADY`))
		if during := o.termios(t); during.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
			t.Errorf("the outer terminal is not in raw mode while the command runs: lflag %#x", during.Lflag)
		}
		ttyEnv, _, _ := strings.Cut(strings.ReplaceAll(o.output(), "\r", ""), "ENVEND")
		if a, b := envSet(plainEnv, "HOSTNAME", "TERM"), envSet(ttyEnv, "HOSTNAME", "TERM"); !slices.Equal(a, b) {
			t.Errorf("the environment differs with -t:\nwithout: %q\nwith:    %q", a, b)
		}
		o.master.WriteString("hello\r")
		o.waitOutput(t, "the typed line", regexp.MustCompile(`got=hello`))
		if err := pty.Setsize(o.master, &pty.Winsize{Rows: 41, Cols: 101}); err != nil {
			t.Fatal(err)
		}
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
	})

	t.Run("no injection", func(t *testing.T) {
		data, err := os.ReadFile(probeBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ws+"/probe", data, 0o755); err != nil {
			t.Fatal(err)
		}
		o := newOuterTerm(t)
		tio := o.termios(t)
		tio.Lflag &^= unix.ICANON
		if err := unix.IoctlSetTermios(int(o.slave.Fd()), unix.TCSETS, tio); err != nil {
			t.Fatal(err)
		}
		injectControl(t, o)
		inject := `for fd in 0 1 2; do ./probe attempt tiocsti <&$fd && echo "own terminal fd $fd" || echo "refused fd $fd"; done
./probe attempt tiocsti </dev/tty && echo "own terminal /dev/tty" || echo "refused /dev/tty"
echo DONE`
		// (-i without -t is the worker's path: the command gets pipes, and
		// vak reads all of stdin before it starts.)
		cmd := o.start(t, vak(o, "-t", id, "--", "sh", "-c", inject)...)
		if code := exitCode(t, cmd); code != 0 {
			t.Fatalf("vak exited %d: %s", code, o.output())
		}
		// The terminal's output may still be on its way to the reader.
		o.waitOutput(t, "the end of the command's output", regexp.MustCompile(`DONE`))
		if n := o.pendingInput(t); n != 0 {
			t.Fatalf("%d bytes were injected into the outer terminal; output:\n%s", n, o.output())
		}
		t.Logf("output:\n%s", o.output())
	})
}

// envSet is the sorted KEY=VALUE lines of env output, without the named
// variables.
func envSet(out string, skip ...string) []string {
	var set []string
	for _, l := range strings.Split(out, "\n") {
		k, _, ok := strings.Cut(l, "=")
		if !ok || slices.Contains(skip, k) {
			continue
		}
		set = append(set, l)
	}
	slices.Sort(set)
	return set
}

// TestSessionExecTTYEndOfInput: the end of the user's terminal input
// reaches a `vak session exec -t` command as end of input, also when it
// ended before vak started (endOfInputCases: what `script` leaves): the
// docker CLI runs on a terminal of vak's own, which gets the keys as typed.
func TestSessionExecTTYEndOfInput(t *testing.T) {
	cfg, labels := sessionEnv(t)
	id := createSession(t, cfg, labels, tempWorkspace(t), "eof")
	for _, c := range endOfInputCases {
		t.Run(c.name, func(t *testing.T) {
			o := newOuterTerm(t)
			before := o.termios(t)
			o.master.WriteString(c.typed)
			args := append(append([]string{"--config", cfg, "session", "exec"}, labels...), "-t", id, "--", "sh", "-c", endOfInputScript)
			cmd := o.start(t, args...)
			checkEndOfInput(t, o, cmd, c.want, before)
		})
	}
}
