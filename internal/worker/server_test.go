package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ReapCommand {
		os.Exit(Reap(os.Args[2:])) // the test binary is the reap shim in shim tests
	}
	// The tests run Exec in this process, as the worker process would
	// after Run: commands must not inherit an ignored SIGINT from a test
	// runner started in the background (TestBashInteractiveSignal's trap).
	// (TestCommandsStartWithDefaultSignals' helper checks it itself.)
	if os.Getenv("VAK_TEST_SIGNALS_HELPER") != "1" {
		UnignoreSignals()
	}
	goleak.VerifyTestMain(m)
}

// conn is a server on pipes, driven line by line.
type conn struct {
	t      *testing.T
	client *wire.Client // when set, it owns out
	in     *io.PipeWriter
	out    *bufio.Reader
	done   chan error
	ws     string
}

func newConn(t *testing.T, files Files) *conn {
	t.Helper()
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if files == nil {
		f, err := OpenFiles(ws, sandbox.WorkspaceWrite, []string{".git/hooks", ".vak"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		files = f
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	srv := &Server{Files: files, Shell: &Exec{Workspace: ws, Env: []string{"PATH=" + os.Getenv("PATH")}, Protected: []string{".git/hooks", ".vak"}}}
	c := &conn{t: t, in: inW, out: bufio.NewReaderSize(outR, 1<<20), done: make(chan error, 1), ws: ws}
	go func() {
		c.done <- srv.Serve(context.Background(), inR, outW)
		outW.Close()
	}()
	var ready wire.Event
	c.readJSON(&ready)
	if ready.Event != "ready" || ready.Version != wire.ProtocolVersion {
		t.Fatalf("first line = %+v, want ready", ready)
	}
	t.Cleanup(c.close)
	return c
}

func (c *conn) close() {
	c.in.Close()
	if c.client == nil {
		io.Copy(io.Discard, c.out)
	}
	if err := <-c.done; err != nil {
		c.t.Errorf("Serve: %v", err)
	}
}

func (c *conn) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

func (c *conn) readJSON(v any) {
	c.t.Helper()
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if err := json.Unmarshal(line, v); err != nil {
		c.t.Fatalf("bad line %q: %v", line, err)
	}
}

func (c *conn) response() wire.Response {
	c.t.Helper()
	var r wire.Response
	c.readJSON(&r)
	return r
}

func TestBadLinesKeepServing(t *testing.T) {
	c := newConn(t, nil)
	for _, tc := range []struct{ line, id, code string }{
		{"this is not json", "", wire.CodeProtocol},
		{`{"id":"1","op":"nope"}`, "1", wire.CodeProtocol},
		{`{"id":"2","op":"read","args":{"path":"x","bogus":1}}`, "2", wire.CodeProtocol},
		{`{"id":"3","op":"read","args":"string"}`, "3", wire.CodeProtocol},
		{`{"op":"ping"}`, "", wire.CodeProtocol},
		{`{"id":"4","op":"ping","extra":true}`, "4", wire.CodeProtocol},
		{`{"id":"5","op":"bash","args":{"command":"echo \u0000"}}`, "5", wire.CodeProtocol},
		{`{"id":"6","op":"cancel","args":{"target":"nothing"}}`, "6", wire.CodeUnknownID},
		{`[1,2,3]`, "", wire.CodeProtocol},
		{`{"id":"7","op":"bash","args":{"command":"true","env":{"HOME":"/"}}}`, "7", wire.CodeProtocol},
		{`{"id":"8","op":"bash","args":{"command":"true","env":{"BAD NAME":"x"}}}`, "8", wire.CodeProtocol},
		{`{"id":"9","op":"bash","args":{"command":"true","env":{"VAK_X":"x"}}}`, "9", wire.CodeProtocol},
	} {
		c.send(tc.line)
		r := c.response()
		if r.OK || r.Error == nil || r.Error.Code != tc.code || r.ID != tc.id {
			t.Errorf("%s: got %+v (error %+v), want id %q code %s", tc.line, r, r.Error, tc.id, tc.code)
		}
	}
	// An oversized line is consumed whole and answered once.
	big := `{"id":"big","op":"write","args":{"path":"f","content":"` + strings.Repeat("A", wire.MaxRequestBytes) + `"}}`
	c.send(big)
	if r := c.response(); r.Error == nil || r.Error.Code != wire.CodeTooLarge {
		t.Fatalf("oversized line: %+v", r)
	}
	c.send(`{"id":"ok","op":"ping"}`)
	if r := c.response(); !r.OK || r.ID != "ok" {
		t.Fatalf("worker stopped serving: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(c.ws, "f")); err == nil {
		t.Fatal("the oversized write was executed")
	}
}

func TestDuplicateIDAndCancel(t *testing.T) {
	c := newConn(t, nil)
	c.send(`{"id":"s","op":"bash","args":{"command":"echo started > started; sleep 100"}}`)
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(c.ws, "started")); err == nil {
			break
		}
		if i > 500 {
			t.Fatal("command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.send(`{"id":"s","op":"ping"}`) // ping is not tracked; a tracked op is:
	if r := c.response(); !r.OK {
		t.Fatalf("ping: %+v", r)
	}
	c.send(`{"id":"s","op":"read","args":{"path":"started"}}`)
	if r := c.response(); r.Error == nil || r.Error.Code != wire.CodeDuplicateID {
		t.Fatalf("duplicate id: %+v", r)
	}
	c.send(`{"id":"c","op":"cancel","args":{"target":"s"}}`)
	got := map[string]wire.Response{}
	for len(got) < 2 {
		r := c.response()
		got[r.ID] = r
	}
	if !got["c"].OK {
		t.Fatalf("cancel: %+v", got["c"])
	}
	var br wire.BashResult
	json.Unmarshal(got["s"].Result, &br)
	if !got["s"].OK || !br.Canceled || br.Signal == "" {
		t.Fatalf("canceled bash: %+v %+v", got["s"], br)
	}
}

func TestBashResults(t *testing.T) {
	c := newConn(t, nil)
	client := wire.NewClient(c.in, c.out)
	c.client = client
	// The conn already consumed the ready line; the client must not wait for it.
	ctx := context.Background()
	run := func(a wire.BashArgs) *wire.BashResult {
		t.Helper()
		r, err := client.Bash(ctx, a, nil)
		if err != nil {
			t.Fatalf("%q: %v", a.Command, err)
		}
		return r
	}
	if r := run(wire.BashArgs{Command: "echo out; echo err >&2; exit 3"}); r.ExitCode != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
		t.Errorf("exit/output: %+v", r)
	}
	if r := run(wire.BashArgs{Command: "kill -TERM $$"}); r.Signal != "terminated" || r.ExitCode != 128+15 {
		t.Errorf("signal: %+v", r)
	}
	if r := run(wire.BashArgs{Command: "head -c 5000 /dev/zero | tr '\\0' a", MaxOutputBytes: 100}); len(r.Stdout) != 100 || !r.StdoutTruncated {
		t.Errorf("truncation: len %d truncated %v", len(r.Stdout), r.StdoutTruncated)
	}
	in := "line1\nline2\n"
	if r := run(wire.BashArgs{Command: "wc -l", Stdin: &in}); strings.TrimSpace(r.Stdout) != "2" {
		t.Errorf("stdin: %+v", r)
	}
	if r := run(wire.BashArgs{Command: "cat"}); r.Stdout != "" || r.ExitCode != 0 {
		t.Errorf("no stdin should read /dev/null: %+v", r)
	}
	os.MkdirAll(filepath.Join(c.ws, "sub"), 0o755)
	if r := run(wire.BashArgs{Command: "pwd; echo $FOO", Cwd: "sub", Env: map[string]string{"FOO": "bar"}}); r.Stdout != filepath.Join(c.ws, "sub")+"\nbar\n" {
		t.Errorf("cwd/env: %q", r.Stdout)
	}
	var chunks strings.Builder
	r, err := client.Bash(ctx, wire.BashArgs{Command: "printf 'a\\0b'; printf x >&2", Stream: true}, func(stream string, data []byte) {
		chunks.WriteString(stream + ":" + string(data) + ";")
	})
	if err != nil || r.Stdout != "" || !strings.Contains(chunks.String(), "stdout:a\x00b;") || !strings.Contains(chunks.String(), "stderr:x;") {
		t.Errorf("streaming: %v %+v %q", err, r, chunks.String())
	}
	// Protected paths a command creates are removed and reported.
	if r := run(wire.BashArgs{Command: "mkdir -p .vak .git/hooks && echo x > .vak/config.toml && echo y > .git/hooks/pre-commit"}); len(r.ProtectedRemoved) != 2 {
		t.Errorf("tripwire: %+v", r)
	}
	for _, p := range []string{".vak", ".git/hooks"} {
		if _, err := os.Stat(filepath.Join(c.ws, p)); err == nil {
			t.Errorf("%s survived", p)
		}
	}
}

func TestBashCwdEscapes(t *testing.T) {
	c := newConn(t, nil)
	client := wire.NewClient(c.in, c.out)
	c.client = client
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(c.ws, "link-out"))
	for _, cwd := range []string{"..", "/", outside, "link-out", "sub/../../x", c.ws + "/../" + filepath.Base(c.ws) + "x"} {
		_, err := client.Bash(context.Background(), wire.BashArgs{Command: "touch escaped", Cwd: cwd}, nil)
		var we *wire.Error
		if !errors.As(err, &we) || (we.Code != wire.CodeOutside && we.Code != wire.CodeNotFound) {
			t.Errorf("cwd %q: %v", cwd, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "escaped")); err == nil {
		t.Fatal("a command ran outside the workspace")
	}
}

type panicky struct{ Files }

func (panicky) Read(wire.ReadArgs) (*wire.ReadResult, error) { panic("boom") }

func TestPanicDoesNotKillWorker(t *testing.T) {
	c := newConn(t, panicky{})
	c.send(`{"id":"p","op":"read","args":{"path":"x"}}`)
	if r := c.response(); r.Error == nil || r.Error.Code != wire.CodeInternal || !strings.Contains(r.Error.Message, "boom") {
		t.Fatalf("panic: %+v", r)
	}
	c.send(`{"id":"ok","op":"ping"}`)
	if r := c.response(); !r.OK {
		t.Fatalf("worker died after a panic: %+v", r)
	}
}

func FuzzServeLine(f *testing.F) {
	for _, s := range []string{`{"id":"1","op":"ping"}`, `{"id":"1","op":"read","args":{"path":"../x"}}`, `{"id":"2","op":"glob","args":{"pattern":"**"}}`, "{", `{"id":1}`,
		`{"id":"3","op":"input","args":{"target":"x","data":"aGk=","eof":true}}`, `{"id":"4","op":"resize","args":{"target":"x","rows":1,"cols":2}}`,
		`{"id":"5","op":"signal","args":{"target":"x","signal":"INT"}}`, `{"id":"6","op":"signal","args":{"target":"x","signal":"KILL"}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\n") || strings.Contains(line, `"bash"`) || strings.Contains(line, `"write"`) || strings.Contains(line, `"edit"`) || strings.Contains(line, `"cancel"`) {
			return // one line, and no side effects on the fuzzing machine
		}
		c := newConn(t, nil)
		// The pipe is synchronous: write while reading.
		go io.WriteString(c.in, line+"\n"+`{"id":"__end","op":"ping"}`+"\n")
		for {
			r := c.response()
			if r.ID == "__end" {
				if !r.OK {
					t.Fatalf("ping failed after %q: %+v", line, r)
				}
				return
			}
		}
	})
}

// lineReader hands the server one line per Read and counts the Reads: a
// Read past the lines blocks until end is closed, then reports EOF.
type lineReader struct {
	lines []string
	reads atomic.Int32
	end   chan struct{}
}

func (r *lineReader) Read(p []byte) (int, error) {
	n := int(r.reads.Add(1))
	if n > len(r.lines) {
		<-r.end
		return 0, io.EOF
	}
	return copy(p, r.lines[n-1]+"\n"), nil
}

// starting is a StartingShell that records how far the server had read
// when it started each command; each command's wait blocks until release
// is closed. Bash (the path of a request that found no free slot) counts
// its calls.
type starting struct {
	r       *lineReader
	release chan struct{}
	mu      sync.Mutex
	readsAt map[string]int32
	bash    atomic.Int32
}

func (s *starting) StartBash(_ context.Context, a wire.BashArgs, _ func(string, []byte)) (func() (*wire.BashResult, error), error) {
	if a.Command == "panic" {
		panic("boom")
	}
	s.mu.Lock()
	s.readsAt[a.Command] = s.r.reads.Load()
	s.mu.Unlock()
	return func() (*wire.BashResult, error) {
		<-s.release
		return &wire.BashResult{Stdout: a.Command}, nil
	}, nil
}

func (s *starting) Bash(_ context.Context, a wire.BashArgs, _ func(string, []byte)) (*wire.BashResult, error) {
	s.bash.Add(1)
	return &wire.BashResult{Stdout: a.Command}, nil
}

// newStarting returns a starting shell whose reader holds n bash requests
// (ids 0 to n-1, commands c0 to cn-1), then the lines of extra.
func newStarting(n int, extra ...string) *starting {
	r := &lineReader{end: make(chan struct{})}
	for i := range n {
		r.lines = append(r.lines, bashLine(strconv.Itoa(i), "c"+strconv.Itoa(i)))
	}
	r.lines = append(r.lines, extra...)
	return &starting{r: r, release: make(chan struct{}), readsAt: map[string]int32{}}
}

// serveStarting serves sh's lines and returns the responses by id once
// the server ended. The commands' waits are released, and the reader
// ends, once the loop asked for a line past the last: it dispatched every
// request (a request that found no slot was dispatched while every slot
// was still held).
func serveStarting(t *testing.T, sh *starting) map[string]wire.Response {
	t.Helper()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- (&Server{Shell: sh}).Serve(context.Background(), sh.r, &out) }()
	waitFor(t, "the server to read past its last request", func() bool { return sh.r.reads.Load() > int32(len(sh.r.lines)) })
	close(sh.release)
	close(sh.r.end)
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	got := map[string]wire.Response{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r wire.Response
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("response %q: %v", sc.Text(), err)
		}
		if r.ID != "" { // not the ready event
			got[r.ID] = r
		}
	}
	return got
}

func bashLine(id, command string) string {
	return fmt.Sprintf(`{"id":%q,"op":"bash","args":{"command":%q}}`, id, command)
}

// A bash request's command starts on the goroutine that reads requests,
// before it reads the next one (sandbox.WorkerOutcome.Serve runs that loop
// on the thread commands may be forked from), and its wait runs elsewhere:
// every command's wait here blocks until the last command started, which
// would never happen if a wait held up the loop. A panic in a start is an
// internal error, and the worker serves on.
func TestServerStartsCommandsOnItsLoop(t *testing.T) {
	const n = 5
	sh := newStarting(n, bashLine("p", "panic"))
	got := serveStarting(t, sh)
	for i := range n {
		c := "c" + strconv.Itoa(i)
		if at := sh.readsAt[c]; at != int32(i+1) {
			t.Errorf("command %s started after %d reads, want %d: not on the loop, between its request and the next", c, at, i+1)
		}
		if res := got[strconv.Itoa(i)]; !res.OK || !strings.Contains(string(res.Result), c) {
			t.Errorf("request %d: %+v", i, res)
		}
	}
	if res := got["p"]; res.Error == nil || res.Error.Code != wire.CodeInternal {
		t.Errorf("a start that panicked: %+v, want an internal error", res)
	}
	if sh.bash.Load() != 0 {
		t.Errorf("Bash called %d times, want every command started on the loop", sh.bash.Load())
	}
}

// A request that arrives while every concurrent slot (wire.MaxConcurrent)
// is held waits for one off the loop and runs through Bash there, and the
// loop reads on meanwhile.
func TestServerSlotsFullWaitOffTheLoop(t *testing.T) {
	sh := newStarting(wire.MaxConcurrent + 1)
	got := serveStarting(t, sh)
	if len(sh.readsAt) != wire.MaxConcurrent || sh.bash.Load() != 1 {
		t.Errorf("%d commands started on the loop and %d through Bash, want %d and 1", len(sh.readsAt), sh.bash.Load(), wire.MaxConcurrent)
	}
	if len(got) != wire.MaxConcurrent+1 {
		t.Errorf("%d responses, want %d", len(got), wire.MaxConcurrent+1)
	}
	for id, res := range got {
		if !res.OK {
			t.Errorf("request %s: %+v", id, res)
		}
	}
}

// waitFor polls cond until it holds or a minute passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Exec.StartBash forks the command before it returns (Spawn has run)
// where the worker makes no check before a command; where it makes one
// (the tripwire walks the workspace), nothing happens until wait, so the
// request loop never walks. Either way wait reports the command.
func TestExecStartBash(t *testing.T) {
	for _, noTripwire := range []bool{true, false} {
		x := argvExec(t)
		x.NoTripwire = noTripwire
		var spawned atomic.Int32
		x.Spawn = func(start func() error) error {
			spawned.Add(1)
			return start()
		}
		wait, err := x.StartBash(context.Background(), wire.BashArgs{Command: "echo started; exit 3"}, nil)
		if err != nil {
			t.Fatalf("NoTripwire=%v: StartBash: %v", noTripwire, err)
		}
		if want := map[bool]int32{true: 1, false: 0}[noTripwire]; spawned.Load() != want {
			t.Errorf("NoTripwire=%v: %d forks when StartBash returned, want %d", noTripwire, spawned.Load(), want)
		}
		res, err := wait()
		if err != nil || res.ExitCode != 3 || res.Stdout != "started\n" || spawned.Load() != 1 {
			t.Errorf("NoTripwire=%v: wait: %+v, %v (%d forks), want exit 3, its output and one fork", noTripwire, res, err, spawned.Load())
		}
	}
	x := argvExec(t)
	x.NoTripwire = true
	if _, err := x.StartBash(context.Background(), wire.BashArgs{Command: "a\x00b"}, nil); err == nil {
		t.Error("StartBash of a command with a NUL byte: no error")
	}
}
