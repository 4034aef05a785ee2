package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
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
