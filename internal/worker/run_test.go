package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"vak/internal/fsguard"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// startRun runs the worker's startup path (run) on pipes with the given
// file-tool opener and returns a client, or the error run returned.
func startRun(t *testing.T, open func(ws string) (Files, io.Closer, error)) (*wire.Client, error) {
	t.Helper()
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	spec := &Spec{Backend: "none", Workspace: ws, Mode: sandbox.WorkspaceWrite, Env: []string{"PATH=" + os.Getenv("PATH")}}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), spec, sandbox.WorkerOutcome{Description: "test"}, inR, outW, func() (Files, io.Closer, error) { return open(ws) }, time.Time{})
		outW.Close()
	}()
	c := wire.NewClient(inW, outR)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		inW.Close()
		return nil, <-done
	}
	t.Cleanup(func() {
		c.Close(context.Background())
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return c, nil
}

// TestRunWithoutFileTools is the startup path of a platform without safe
// file tools (fsguard is Linux-only, so on macOS OpenFiles always fails with
// ErrUnsupported): the worker still starts, bash works, and every file tool
// answers with code unsupported.
func TestRunWithoutFileTools(t *testing.T) {
	unsupported := fmt.Errorf("fsguard: %w on darwin (openat2 with RESOLVE_BENEATH is Linux-only)", fsguard.ErrUnsupported)
	c, err := startRun(t, func(string) (Files, io.Closer, error) { return nil, nil, unsupported })
	if err != nil {
		t.Fatalf("worker did not start without file tools: %v", err)
	}
	ctx := context.Background()
	res, err := c.Bash(ctx, wire.BashArgs{Command: "echo hello from bash"}, nil)
	if err != nil || res.ExitCode != 0 || res.Stdout != "hello from bash\n" {
		t.Fatalf("bash = %+v, %v; want exit 0 and its output", res, err)
	}
	calls := []struct {
		op   string
		args any
		res  any
	}{
		{wire.OpRead, wire.ReadArgs{Path: "f"}, &wire.ReadResult{}},
		{wire.OpWrite, wire.WriteArgs{Path: "f", Content: "x"}, &wire.WriteResult{}},
		{wire.OpEdit, wire.EditArgs{Path: "f", Old: "a", New: "b"}, &wire.EditResult{}},
		{wire.OpGlob, wire.GlobArgs{Pattern: "*"}, &wire.GlobResult{}},
		{wire.OpGrep, wire.GrepArgs{Pattern: "x"}, &wire.GrepResult{}},
	}
	for _, tc := range calls {
		err := c.Call(ctx, tc.op, tc.args, tc.res)
		if !errors.Is(err, &wire.Error{Code: wire.CodeUnsupported}) {
			t.Errorf("%s without file tools: err = %v, want code %s", tc.op, err, wire.CodeUnsupported)
		}
	}
	// The tool list says so: bash only.
	if tools, err := c.Tools(ctx); err != nil || !slices.Equal(tools, []string{wire.OpBash}) {
		t.Fatalf("tools without file tools = %v, %v; want [bash]", tools, err)
	}
}

// TestRunFileToolsOpenFails: any other failure to open the workspace still
// fails the start (fail closed), and with the real opener the file tools
// work (the positive control of the test above).
func TestRunFileToolsOpenFails(t *testing.T) {
	broken := errors.New("open workspace: permission denied")
	if _, err := startRun(t, func(string) (Files, io.Closer, error) { return nil, nil, broken }); !errors.Is(err, broken) {
		t.Fatalf("run with a broken workspace = %v, want %v", err, broken)
	}
	c, err := startRun(t, func(ws string) (Files, io.Closer, error) {
		f, err := OpenFiles(ws, sandbox.WorkspaceWrite, nil)
		if err != nil {
			return nil, nil, err
		}
		return f, f, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Call(ctx, wire.OpWrite, wire.WriteArgs{Path: "f", Content: "x"}, &wire.WriteResult{}); err != nil {
		t.Fatalf("write with file tools: %v", err)
	}
	var r wire.ReadResult
	if err := c.Call(ctx, wire.OpRead, wire.ReadArgs{Path: "f"}, &r); err != nil || r.Content != "x" {
		t.Fatalf("read with file tools = %+v, %v", r, err)
	}
	// The tool list names them, and never the agent network (served by the
	// trusted side, not by a worker); unknown arguments are refused.
	want := []string{wire.OpBash, wire.OpRead, wire.OpWrite, wire.OpEdit, wire.OpGlob, wire.OpGrep}
	if tools, err := c.Tools(ctx); err != nil || !slices.Equal(tools, want) {
		t.Fatalf("tools = %v, %v; want %v", tools, err, want)
	}
	if err := c.Call(ctx, wire.OpTools, map[string]any{"x": 1}, &wire.ToolsResult{}); !errors.Is(err, &wire.Error{Code: wire.CodeProtocol}) {
		t.Fatalf("tools with an unknown argument: %v", err)
	}
	if err := c.Call(ctx, wire.ToolAgentNetwork, wire.AgentNetworkArgs{Op: "peers"}, &wire.AgentNetworkResult{}); !errors.Is(err, &wire.Error{Code: wire.CodeProtocol}) {
		t.Fatalf("agent_network sent to a worker: %v, want %s (unknown op)", err, wire.CodeProtocol)
	}
}
