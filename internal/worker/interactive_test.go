package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// collect gathers streamed output.
type collect struct {
	mu  sync.Mutex
	out map[string]*strings.Builder
}

func (c *collect) emit(stream string, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		c.out = map[string]*strings.Builder{}
	}
	if c.out[stream] == nil {
		c.out[stream] = &strings.Builder{}
	}
	c.out[stream].Write(data)
}

func (c *collect) get(stream string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out[stream] == nil {
		return ""
	}
	return c.out[stream].String()
}

func TestBashInteractive(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		args    wire.BashArgs
		stdin   string
		resize  []wire.TTYSize
		code    int
		streams map[string]*regexp.Regexp
	}{
		{
			name:  "pipe",
			args:  wire.BashArgs{Command: "cat; echo err >&2; test -t 0 || echo notty", Interactive: true},
			stdin: strings.Repeat("x", 200000),
			streams: map[string]*regexp.Regexp{
				"stdout": regexp.MustCompile(`^` + strings.Repeat("x", 200000) + `notty\n$`),
				"stderr": regexp.MustCompile(`^err\n$`),
			},
		},
		{
			name:  "tty",
			args:  wire.BashArgs{Command: "tty; stty size; read x; echo got=$x; echo err >&2; exit 4", TTY: &wire.TTYSize{Rows: 33, Cols: 77}},
			stdin: "hi\n",
			code:  4,
			// One terminal: stderr arrives on stdout too.
			streams: map[string]*regexp.Regexp{
				"stdout": regexp.MustCompile(`(?s)/dev/pts/\d+\r\n(hi\r\n)?33 77\r\n.*got=hi\r\nerr\r\n$`),
				"stderr": regexp.MustCompile(`^$`),
			},
		},
		{
			name: "tty eof",
			args: wire.BashArgs{Command: "cat; echo done", TTY: &wire.TTYSize{Rows: 5, Cols: 5}},
			// EOF after the input ends cat (the terminal's ^D).
			stdin:   "a\n",
			streams: map[string]*regexp.Regexp{"stdout": regexp.MustCompile(`(?s)a\r\na\r\n.*done\r\n$`)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConn(t, nil)
			client := wire.NewClient(c.in, c.out)
			c.client = client
			var out collect
			res, err := client.BashInteractive(ctx, tc.args, strings.NewReader(tc.stdin), nil, nil, out.emit)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.code {
				t.Errorf("exit %d, want %d; stdout %q", res.ExitCode, tc.code, out.get("stdout"))
			}
			for s, re := range tc.streams {
				if got := out.get(s); !re.MatchString(got) {
					t.Errorf("%s = %.300q, want %v", s, got, re)
				}
			}
		})
	}
}

func TestBashInteractiveResizeAndErrors(t *testing.T) {
	ctx := context.Background()
	c := newConn(t, nil)
	client := wire.NewClient(c.in, c.out)
	c.client = client
	// Input and resize for a request that is not in flight.
	for _, op := range []string{wire.OpInput, wire.OpResize} {
		var we *wire.Error
		if err := client.Call(ctx, op, wire.InputArgs{Target: "nope"}, nil); !errors.As(err, &we) || we.Code != wire.CodeUnknownID {
			t.Errorf("%s to nothing: %v, want %s", op, err, wire.CodeUnknownID)
		}
	}
	// Stdin and Interactive together are refused.
	s := "x"
	if _, err := client.BashInteractive(ctx, wire.BashArgs{Command: "true", Interactive: true, Stdin: &s}, nil, nil, nil, func(string, []byte) {}); err == nil {
		t.Error("stdin plus interactive accepted")
	}
	// A resize reaches the command's terminal (SIGWINCH, new size).
	resize := make(chan wire.TTYSize, 1)
	var out collect
	pr, pw := newBlockingInput()
	done := make(chan error, 1)
	go func() {
		_, err := client.BashInteractive(ctx, wire.BashArgs{Command: `trap 'stty size; exit 0' WINCH; echo armed; while :; do read x; done`, TTY: &wire.TTYSize{Rows: 10, Cols: 10}}, pr, resize, nil, out.emit)
		done <- err
	}()
	waitUntil(t, "the trap", func() bool { return strings.Contains(out.get("stdout"), "armed") })
	resize <- wire.TTYSize{Rows: 50, Cols: 60}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if !strings.Contains(out.get("stdout"), "50 60") {
		t.Errorf("after resize: %q", out.get("stdout"))
	}
}

// newBlockingInput is stdin that has nothing until closed.
func newBlockingInput() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

// waitUntil polls cond (a hang fails after a generous bound, not a slow
// machine).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBashInteractiveLifeline: with a lifeline (the docker backend's host
// worker), an interactive command reads the user's input on stdin and the
// lifeline on sandbox.InteractiveLifelineFD; a plain command still gets
// the lifeline as its stdin.
func TestBashInteractiveLifeline(t *testing.T) {
	ws := t.TempDir()
	lr, lw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Close()
	defer lw.Close()
	if _, err := lw.WriteString("from-lifeline\nfrom-lifeline\n"); err != nil {
		t.Fatal(err)
	}
	x := &Exec{Workspace: ws, Env: []string{"PATH=" + os.Getenv("PATH")}, NoTripwire: true, Lifeline: lr}
	fd := strconv.Itoa(sandbox.InteractiveLifelineFD)
	for _, tty := range []bool{false, true} {
		in := NewInteraction(wire.TTYSize{Rows: 5, Cols: 40})
		go in.Input([]byte("from-user\n"), true)
		a := wire.BashArgs{Command: "read a; echo stdin=$a; read b <&" + fd + "; echo fd" + fd + "=$b", Interactive: true}
		if tty {
			a.TTY = &wire.TTYSize{Rows: 5, Cols: 40}
		}
		var out collect
		res, err := x.BashInteractive(context.Background(), a, in, out.emit)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.get("stdout"); res.ExitCode != 0 || !strings.Contains(got, "stdin=from-user") || !strings.Contains(got, "fd"+fd+"=from-lifeline") {
			t.Errorf("tty=%v: exit %d, stdout %q", tty, res.ExitCode, got)
		}
	}
	if _, err := lw.WriteString("again\n"); err != nil {
		t.Fatal(err)
	}
	res, err := x.Bash(context.Background(), wire.BashArgs{Command: "read a; echo stdin=$a"}, nil)
	if err != nil || res.ExitCode != 0 || res.Stdout != "stdin=again\n" {
		t.Errorf("plain command: %v %+v", err, res)
	}
}

// TestBashInteractiveSignal: a signal request reaches the interactive
// command's process group (the trap of a shell runs, the status is the
// command's), on a pipe and on a terminal; unknown signal names, signals
// outside the allowlist and unknown targets are refused, and a signal for
// a command that ended finds nothing.
func TestBashInteractiveSignal(t *testing.T) {
	ctx := context.Background()
	c := newConn(t, nil)
	client := wire.NewClient(c.in, c.out)
	c.client = client
	for _, tc := range []struct{ sig, code string }{
		{"INT", wire.CodeUnknownID}, // a valid signal, for nothing in flight
		{"KILL", wire.CodeProtocol}, {"STOP", wire.CodeProtocol}, {"", wire.CodeProtocol},
		{"SIGINT", wire.CodeProtocol}, {"int", wire.CodeProtocol}, {"2", wire.CodeProtocol},
	} {
		var we *wire.Error
		err := client.Call(ctx, wire.OpSignal, wire.SignalArgs{Target: "nope", Signal: tc.sig}, nil)
		if !errors.As(err, &we) || we.Code != tc.code {
			t.Errorf("signal %q to nothing: %v, want %s", tc.sig, err, tc.code)
		}
	}
	for _, tty := range []bool{false, true} {
		a := wire.BashArgs{Command: `trap 'echo got-usr1' USR1; trap 'echo got-int; exit 7' INT; echo ready; while :; do sleep 0.05; done`, Interactive: true}
		if tty {
			a.TTY = &wire.TTYSize{Rows: 5, Cols: 40}
		}
		sigs := make(chan string, 1)
		var out collect
		pr, pw := newBlockingInput()
		done := make(chan *wire.BashResult, 1)
		go func() {
			res, err := client.BashInteractive(ctx, a, pr, nil, sigs, out.emit)
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		waitUntil(t, "ready", func() bool { return strings.Contains(out.get("stdout"), "ready") })
		sigs <- "USR1"
		waitUntil(t, "the USR1 trap", func() bool { return strings.Contains(out.get("stdout"), "got-usr1") })
		sigs <- "INT"
		res := <-done
		pw.Close()
		if res == nil || res.ExitCode != 7 || !strings.Contains(out.get("stdout"), "got-int") {
			t.Errorf("tty=%v: %+v, stdout %q; want the INT trap's exit 7", tty, res, out.get("stdout"))
		}
	}
}

// TestInteractionSignalEnded: a signal before the command started waits
// for it; one after it ended fails.
func TestInteractionSignalEnded(t *testing.T) {
	in := NewInteraction(wire.TTYSize{})
	if err := in.Signal("INT"); err != nil {
		t.Fatalf("before start: %v", err)
	}
	var got []string
	in.watchSignals(func(s syscall.Signal) error { got = append(got, s.String()); return nil })
	if len(got) != 1 || got[0] != syscall.SIGINT.String() {
		t.Errorf("queued signals delivered at start: %v", got)
	}
	in.end()
	if err := in.Signal("TERM"); !errors.Is(err, errCommandEnded) {
		t.Errorf("after the end: %v", err)
	}
	for _, name := range wire.Signals {
		if _, ok := signalNumbers[name]; !ok {
			t.Errorf("wire.Signals has %s, the worker no number for it", name)
		}
	}
}

// TestCommandsStartWithDefaultSignals: a worker started with SIGINT and
// SIGHUP ignored (a background job of a script, nohup) starts its commands
// with the default dispositions. The helper process inherits the ignores
// (positive control: it reports them ignored itself) and runs a command
// through Exec after UnignoreSignals.
func TestCommandsStartWithDefaultSignals(t *testing.T) {
	if os.Getenv("VAK_TEST_SIGNALS_HELPER") == "1" {
		ignored := signal.Ignored(syscall.SIGINT) && signal.Ignored(syscall.SIGHUP)
		UnignoreSignals()
		x := &Exec{Workspace: os.Getenv("VAK_TEST_WS"), Env: []string{"PATH=" + os.Getenv("PATH")}}
		res, err := x.Bash(context.Background(), wire.BashArgs{Command: "grep SigIgn /proc/self/status"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("helper-ignored=%v command:%s", ignored, res.Stdout)
		return
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/status")
	}
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// sh -c "trap '' INT HUP; exec helper": the helper starts with both ignored.
	cmd := exec.Command("/bin/sh", "-c", `trap '' INT HUP; exec "$0" -test.run '^TestCommandsStartWithDefaultSignals$' -test.count=1`, os.Args[0])
	cmd.Env = append(os.Environ(), "VAK_TEST_SIGNALS_HELPER=1", "VAK_TEST_WS="+ws)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "helper-ignored=true") {
		t.Fatalf("the helper did not start with SIGINT and SIGHUP ignored: the test proves nothing\n%s", out)
	}
	m := regexp.MustCompile(`command:SigIgn:\s*([0-9a-f]+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no SigIgn line from the command:\n%s", out)
	}
	mask, _ := strconv.ParseUint(m[1], 16, 64)
	if bad := mask & (1<<(syscall.SIGINT-1) | 1<<(syscall.SIGHUP-1)); bad != 0 {
		t.Fatalf("the command started with SigIgn %s (SIGINT or SIGHUP ignored)", m[1])
	}
}
