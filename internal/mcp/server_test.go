package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/landlock"
	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// fixture is a server on a real landlock sandbox in a fresh workspace and
// an SDK client connected to it in process.
type fixture struct {
	ws      string
	cs      *sdk.ClientSession
	srv     *Server
	mu      sync.Mutex
	last    *broker.Session // the worker started last
	started int
}

func newFixture(t testing.TB, mode sandbox.Mode, mut func(*Options)) *fixture {
	t.Helper()
	testenv.RequireLandlock(t)
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Sandbox.Mode = mode
	t.Setenv(paths.EnvStateHome, t.TempDir()) // the workspace's persistent home
	vak := testenv.Vak(t)
	f := &fixture{ws: ws}
	o := Options{
		Workspace: ws,
		Mode:      mode,
		Start: BrokerWorker(func(ctx context.Context) (*broker.Session, error) {
			s, err := broker.Start(ctx, broker.Options{Config: cfg, Workspace: ws, Backend: &landlock.Backend{}, Executable: vak})
			if err == nil {
				f.mu.Lock()
				f.last, f.started = s, f.started+1
				f.mu.Unlock()
			}
			return s, err
		}),
	}
	if mut != nil {
		mut(&o)
	}
	f.srv, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.srv.Close() })
	ct, st := sdk.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := f.srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	f.cs, err = sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.cs.Close() })
	return f
}

// call calls a tool; it fails the test on a protocol error.
func (f *fixture) call(t *testing.T, name string, args any) *sdk.CallToolResult {
	t.Helper()
	res, err := f.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error: %v", name, args, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured result
// (read_file's: the JSON object of its one text block).
func ok[T any](t *testing.T, f *fixture, name string, args any) T {
	t.Helper()
	res := f.call(t, name, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", name, args, text(res))
	}
	var out T
	data, _ := json.Marshal(res.StructuredContent)
	if res.StructuredContent == nil {
		data = []byte(text(res))
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: structured result %s: %v", name, data, err)
	}
	return out
}

// refused calls a tool that must fail with a tool error containing want.
func refused(t *testing.T, f *fixture, name string, args any, want string) {
	t.Helper()
	res := f.call(t, name, args)
	if !res.IsError {
		t.Fatalf("%s %v: succeeded, want a tool error containing %q: %s", name, args, want, text(res))
	}
	if !strings.Contains(text(res), want) {
		t.Fatalf("%s %v: error %q does not contain %q", name, args, text(res), want)
	}
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolList(t *testing.T) {
	for _, tc := range []struct {
		mode sandbox.Mode
		want []string
	}{
		{sandbox.WorkspaceWrite, []string{"bash", "read_file", "write_file", "edit_file", "glob", "grep"}},
		{sandbox.ReadOnly, []string{"bash", "read_file", "glob", "grep"}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			f := newFixture(t, tc.mode, nil)
			var got []string
			for tool, err := range f.cs.Tools(context.Background(), nil) {
				if err != nil {
					t.Fatal(err)
				}
				// read_file sends its result once, as text: no output
				// schema (which would make the SDK send it twice).
				if tool.Description == "" || tool.InputSchema == nil || (tool.OutputSchema == nil) != (tool.Name == "read_file") {
					t.Errorf("%s: missing description or schema, or read_file with an output schema", tool.Name)
				}
				got = append(got, tool.Name)
				if tool.Name == "bash" && strings.Contains(tool.Description, "read-only mode") != (tc.mode == sandbox.ReadOnly) {
					t.Errorf("bash description does not match mode %s: %s", tc.mode, tool.Description)
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Fatalf("tools = %v, want %v", got, want)
			}
			if f.started != 0 {
				t.Errorf("listing tools started %d workers; they start on the first call", f.started)
			}
		})
	}
}

func TestHappyPaths(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	w := ok[WriteOutput](t, f, "write_file", map[string]any{"path": "src/a.txt", "content": "hello\nworld\n"})
	if w.Bytes != 12 {
		t.Errorf("write bytes = %d", w.Bytes)
	}
	if data, _ := os.ReadFile(filepath.Join(f.ws, "src/a.txt")); string(data) != "hello\nworld\n" {
		t.Fatalf("file on the host = %q", data)
	}
	r := ok[ReadOutput](t, f, "read_file", map[string]any{"path": "src/a.txt"})
	if r.Content != "hello\nworld\n" || r.Size != 12 || r.Truncated {
		t.Errorf("read = %+v", r)
	}
	r = ok[ReadOutput](t, f, "read_file", map[string]any{"path": filepath.Join(f.ws, "src/a.txt"), "offset": 6, "limit": 3})
	if r.Content != "wor" || !r.Truncated {
		t.Errorf("read offset 6 limit 3 = %+v", r)
	}
	e := ok[EditOutput](t, f, "edit_file", map[string]any{"path": "src/a.txt", "old_string": "world", "new_string": "there"})
	if e.Replacements != 1 {
		t.Errorf("edit = %+v", e)
	}
	g := ok[GlobOutput](t, f, "glob", map[string]any{"pattern": "**/*.txt"})
	if !slices.Equal(g.Paths, []string{"src/a.txt"}) {
		t.Errorf("glob = %+v", g)
	}
	m := ok[GrepOutput](t, f, "grep", map[string]any{"pattern": "^th.re$"})
	if len(m.Matches) != 1 || m.Matches[0].Path != "src/a.txt" || m.Matches[0].Line != 2 || m.Matches[0].Text != "there" {
		t.Errorf("grep = %+v", m)
	}
	b := ok[BashOutput](t, f, "bash", map[string]any{"command": "cat src/a.txt; read x; echo \"in:$x\"; echo err >&2; exit 3", "stdin": "typed\n"})
	if b.ExitCode != 3 || b.Stdout != "hello\nthere\nin:typed\n" || b.Stderr != "err\n" || b.TimedOut || b.Truncated {
		t.Errorf("bash = %+v", b)
	}
	b = ok[BashOutput](t, f, "bash", map[string]any{"command": "pwd; touch made-by-bash", "cwd": "src"})
	if b.Stdout != filepath.Join(f.ws, "src")+"\n" {
		t.Errorf("bash cwd = %q", b.Stdout)
	}
	if _, err := os.Stat(filepath.Join(f.ws, "src", "made-by-bash")); err != nil {
		t.Errorf("bash could not write the workspace: %v", err)
	}
	if f.started != 1 {
		t.Errorf("%d workers started for one server; want one warm worker", f.started)
	}
}

// TestRefusals attempts escapes through every file tool and bash; each
// has a positive control: the same target is reachable outside the sandbox.
func TestRefusals(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	if err := os.WriteFile(canary, []byte("CANARY-SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Positive control: the canary is readable by this process.
	if data, err := os.ReadFile(canary); err != nil || string(data) != "CANARY-SECRET" {
		t.Fatalf("control: cannot read the canary outside the sandbox: %v", err)
	}
	if err := os.Symlink(outside, filepath.Join(f.ws, "link-out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(canary, filepath.Join(f.ws, "canary-link")); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(f.ws, canary)
	escapes := []string{rel, canary, "link-out/canary", "canary-link", "/proc/self/root" + canary, "src/../../" + filepath.Base(outside) + "/canary"}
	for _, p := range escapes {
		t.Run("read "+p, func(t *testing.T) { refused(t, f, "read_file", map[string]any{"path": p}, "outside_workspace") })
		t.Run("write "+p, func(t *testing.T) {
			res := f.call(t, "write_file", map[string]any{"path": p, "content": "pwned"})
			if !res.IsError {
				t.Fatalf("write %s succeeded", p)
			}
		})
		t.Run("edit "+p, func(t *testing.T) {
			res := f.call(t, "edit_file", map[string]any{"path": p, "old_string": "CANARY", "new_string": "pwned"})
			if !res.IsError {
				t.Fatalf("edit %s succeeded", p)
			}
		})
	}
	if data, _ := os.ReadFile(canary); string(data) != "CANARY-SECRET" {
		t.Fatalf("the canary outside the workspace was changed: %q", data)
	}
	t.Run("grep outside", func(t *testing.T) {
		refused(t, f, "grep", map[string]any{"pattern": "CANARY", "path": outside}, "outside_workspace")
	})
	t.Run("grep through a link", func(t *testing.T) {
		m := ok[GrepOutput](t, f, "grep", map[string]any{"pattern": "CANARY"})
		if len(m.Matches) != 0 {
			t.Fatalf("grep of the workspace found the canary through a link: %+v", m)
		}
	})
	t.Run("glob outside", func(t *testing.T) {
		res := f.call(t, "glob", map[string]any{"pattern": "../**/canary"})
		if !res.IsError && strings.Contains(text(res), "canary\"") {
			t.Fatalf("glob reached outside: %s", text(res))
		}
	})
	t.Run("bash cannot read outside", func(t *testing.T) {
		b := ok[BashOutput](t, f, "bash", map[string]any{"command": "cat " + canary + "; cat link-out/canary; cat canary-link"})
		if strings.Contains(b.Stdout, "CANARY-SECRET") || b.ExitCode == 0 {
			t.Fatalf("bash read the canary: %+v", b)
		}
	})
	t.Run("bash cwd outside", func(t *testing.T) {
		refused(t, f, "bash", map[string]any{"command": "pwd", "cwd": "../"}, "outside_workspace")
	})
	// Protected paths, existing and not yet existing.
	for _, p := range []string{".git/config", ".git/hooks/pre-commit", ".vak/config.toml", ".envrc", ".git/info/attributes"} {
		t.Run("write protected "+p, func(t *testing.T) {
			refused(t, f, "write_file", map[string]any{"path": p, "content": "x"}, "protected_path")
		})
	}
	t.Run("edit protected", func(t *testing.T) {
		refused(t, f, "edit_file", map[string]any{"path": ".git/config", "old_string": "[core]", "new_string": "[core]\n\thooksPath = /tmp"}, "protected_path")
	})
	if data, _ := os.ReadFile(filepath.Join(f.ws, ".git/config")); string(data) != "[core]\n" {
		t.Fatalf(".git/config changed: %q", data)
	}
	t.Run("bash creates a protected path", func(t *testing.T) {
		b := ok[BashOutput](t, f, "bash", map[string]any{"command": "printf '#!/bin/sh\\n' > .git/hooks/pre-commit; echo rc=$?"})
		if _, err := os.Lstat(filepath.Join(f.ws, ".git/hooks/pre-commit")); err == nil {
			t.Fatalf("a hook created through bash survived: %+v", b)
		}
	})
	// Positive control for the protected paths: an ordinary path next to them is writable.
	ok[WriteOutput](t, f, "write_file", map[string]any{"path": ".git/description", "content": "x"})
	// Edit refusals.
	ok[WriteOutput](t, f, "write_file", map[string]any{"path": "e.txt", "content": "a a"})
	refused(t, f, "edit_file", map[string]any{"path": "e.txt", "old_string": "b", "new_string": "c"}, "no_match")
	refused(t, f, "edit_file", map[string]any{"path": "e.txt", "old_string": "a", "new_string": "c"}, "ambiguous")
	refused(t, f, "read_file", map[string]any{"path": "missing"}, "not_found")
	refused(t, f, "grep", map[string]any{"pattern": "("}, "invalid_pattern")
}

func TestReadOnlyMode(t *testing.T) {
	f := newFixture(t, sandbox.ReadOnly, nil)
	if err := os.WriteFile(filepath.Join(f.ws, "r.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok[ReadOutput](t, f, "read_file", map[string]any{"path": "r.txt"})
	res, err := f.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "w.txt", "content": "x"}})
	if err == nil && !res.IsError {
		t.Fatal("write_file works in read-only mode")
	}
	b := ok[BashOutput](t, f, "bash", map[string]any{"command": "touch w.txt"})
	if b.ExitCode == 0 {
		t.Fatal("bash wrote the workspace in read-only mode")
	}
}

// procsWith lists host processes whose command line contains s.
func procsWith(s string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		data, err := os.ReadFile(d)
		if err == nil && strings.Contains(strings.ReplaceAll(string(data), "\x00", " "), s) {
			found = append(found, d)
		}
	}
	return found
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTimeoutKillsTree(t *testing.T) {
	// Control: the scan sees a process with the marker.
	ctl := exec.Command("sleep", "3011")
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "control process visible", func() bool { return len(procsWith("sleep 3011")) > 0 })
	ctl.Process.Kill()
	ctl.Wait()

	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	// A double-forked job, one that left the session (setsid), and one two
	// sessions down whose parents are gone: each says which session it is
	// in (the control: the sessions were made), then the command waits.
	cmd := `echo started; (sleep 3007 &)
(setsid sh -c 'echo "left pid=$$ sid=$(cut -d" " -f6 /proc/$$/stat)"; exec sleep 3008' &)
(setsid sh -c 'setsid sh -c "echo \"deeper pid=\$\$ sid=\$(cut -d\" \" -f6 /proc/\$\$/stat)\"; exec sleep 3009" &' &)
sleep 3007`
	res := f.call(t, "bash", map[string]any{"command": cmd, "timeout": 5})
	if !res.IsError || !strings.Contains(text(res), "timed out") || !strings.Contains(text(res), "started") {
		t.Fatalf("timeout result = %v %s", res.IsError, text(res))
	}
	for _, who := range []string{"left", "deeper"} {
		m := regexp.MustCompile(who + ` pid=(\d+) sid=(\d+)`).FindStringSubmatch(text(res))
		if m == nil || m[1] != m[2] {
			t.Errorf("control: the %s job did not lead a session of its own: %s", who, text(res))
		}
	}
	var out BashOutput
	data, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(data, &out)
	if !out.TimedOut {
		t.Errorf("structured result does not say timed_out: %s", data)
	}
	waitFor(t, "the timed-out tree is dead", func() bool {
		return len(procsWith("sleep 3007"))+len(procsWith("sleep 3008"))+len(procsWith("sleep 3009")) == 0
	})
	ok[BashOutput](t, f, "bash", map[string]any{"command": "true"})
}

func TestTimeoutCap(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, func(o *Options) { o.MaxTimeout = time.Second })
	res := f.call(t, "bash", map[string]any{"command": "sleep 3012", "timeout": 3600})
	if !res.IsError || !strings.Contains(text(res), "timed out after 1s") {
		t.Fatalf("capped timeout: %s", text(res))
	}
}

func TestTruncation(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, func(o *Options) { o.OutputBytes = 1000 })
	b := ok[BashOutput](t, f, "bash", map[string]any{"command": "head -c 5000 /dev/zero | tr '\\0' a; echo short >&2"})
	if !b.Truncated || !b.StdoutTruncated || b.StderrTruncated || len(b.Stdout) != 1000 || b.Stderr != "short\n" {
		t.Fatalf("truncation: truncated=%v/%v/%v len(stdout)=%d stderr=%q", b.Truncated, b.StdoutTruncated, b.StderrTruncated, len(b.Stdout), b.Stderr)
	}
	b = ok[BashOutput](t, f, "bash", map[string]any{"command": "head -c 1000 /dev/zero | tr '\\0' a"})
	if b.Truncated || len(b.Stdout) != 1000 {
		t.Fatalf("exactly the limit: truncated=%v len=%d", b.Truncated, len(b.Stdout))
	}
}

func TestConcurrentCalls(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			res, err := f.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": fmt.Sprintf("echo %d > f%d; cat f%d", i, i, i)}})
			if err != nil || res.IsError || !strings.Contains(text(res), fmt.Sprintf(`"stdout":"%d\n"`, i)) {
				errs <- fmt.Errorf("bash %d: %v %v", i, err, res)
			}
		}()
		go func() {
			defer wg.Done()
			res, err := f.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": fmt.Sprintf("w%d", i), "content": "x"}})
			if err != nil || res.IsError {
				errs <- fmt.Errorf("write %d: %v %v", i, err, res)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if f.started != 1 {
		t.Errorf("%d workers for concurrent calls, want 1", f.started)
	}
}

func TestWorkerDiesMidCall(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	ok[BashOutput](t, f, "bash", map[string]any{"command": "true"})
	done := make(chan *sdk.CallToolResult)
	go func() {
		res, err := f.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sleep 3013"}})
		if err != nil {
			t.Errorf("protocol error: %v", err)
		}
		done <- res
	}()
	waitFor(t, "the command runs", func() bool { return len(procsWith("sleep 3013")) > 0 })
	f.mu.Lock()
	f.last.Client().Kill()
	f.mu.Unlock()
	res := <-done
	if res == nil || !res.IsError || !strings.Contains(text(res), "worker exited") {
		t.Fatalf("call during worker death: %+v", res)
	}
	waitFor(t, "the sandbox died with its worker", func() bool { return len(procsWith("sleep 3013")) == 0 })
	b := ok[BashOutput](t, f, "bash", map[string]any{"command": "echo again"})
	if b.Stdout != "again\n" {
		t.Fatalf("after restart: %+v", b)
	}
	if f.started != 2 {
		t.Errorf("workers started = %d, want 2 (one restart)", f.started)
	}
}

func TestMalformedArguments(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	for _, tc := range []struct {
		tool string
		args any
	}{
		{"bash", map[string]any{"command": 5}},
		{"bash", map[string]any{}},
		{"bash", map[string]any{"command": "true", "timeout": "soon"}},
		{"bash", map[string]any{"command": "true", "timeout": -1}},
		{"bash", map[string]any{"command": "true", "bogus": 1}},
		{"bash", map[string]any{"command": ""}},
		{"read_file", map[string]any{"path": []string{"a"}}},
		{"read_file", map[string]any{"path": "a", "offset": -5}},
		{"write_file", map[string]any{"path": "a"}},
		{"edit_file", map[string]any{"path": "a", "old_string": "", "new_string": "x"}},
		{"glob", map[string]any{"pattern": nil}},
		{"grep", map[string]any{"pattern": "x", "max": -1}},
		{"read_file", map[string]any{"path": "a\x00b"}},
		{"no_such_tool", map[string]any{}},
	} {
		t.Run(fmt.Sprintf("%s %v", tc.tool, tc.args), func(t *testing.T) {
			res, err := f.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tc.tool, Arguments: tc.args})
			if err == nil && !res.IsError {
				t.Fatalf("accepted: %s", text(res))
			}
		})
	}
	// The server is still serving.
	if b := ok[BashOutput](t, f, "bash", map[string]any{"command": "echo alive"}); b.Stdout != "alive\n" {
		t.Fatalf("after malformed calls: %+v", b)
	}
}

// TestStdioGarbageLine: on stdio a line that is not JSON (or is too long)
// gets a JSON-RPC parse error and the session goes on.
func TestStdioGarbageLine(t *testing.T) {
	f := newFixture(t, sandbox.WorkspaceWrite, nil)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.ServeStdio(ctx, inR, outW) }()
	defer func() {
		cancel()
		inW.Close()
		outR.Close()
		<-done
	}()
	lines := bufio.NewReader(outR)
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() map[string]any {
		t.Helper()
		line, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("server wrote a line that is not JSON: %q", line)
		}
		return m
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	if m := recv(); m["id"] != float64(1) || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, tc := range []struct {
		garbage string
		code    float64
	}{
		{"garbage{{{", -32700},
		{`{"jsonrpc":"2.0","id":`, -32700},
		{strings.Repeat("x", wire.MaxRequestBytes+10), -32600}, // request_too_large
	} {
		send(tc.garbage)
		m := recv()
		e, _ := m["error"].(map[string]any)
		if e == nil || e["code"] != tc.code || m["id"] != nil {
			t.Fatalf("answer to %.20q: %v", tc.garbage, m)
		}
	}
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo alive"}}}`)
	m := recv()
	res, _ := m["result"].(map[string]any)
	if m["id"] != float64(2) || res == nil || res["isError"] == true || !strings.Contains(fmt.Sprint(res["structuredContent"]), "alive") {
		t.Fatalf("after garbage: %v", m)
	}
}
