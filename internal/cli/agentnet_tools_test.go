package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"vak/internal/agentnet"
	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/launch"
	"vak/internal/receipts"
	"vak/internal/sandbox"
	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// TestWorkerToolListAgentNetwork: a broker session (the worker protocol's
// trusted side, as an embedder runs it, on the landlock backend) whose
// workspace has an agent network task lists agent_network next to the
// worker's tools only while the workspace has a live edge: absent while
// the peer's policy does not name it, present once both do (a send and a
// receive cross the edge through the session's host tool), absent again
// after a reload drops the edge. The token never reaches the sandbox (a
// command dumps the environment and command line of every process it can
// see) nor a tool result (each is scanned for the token and its parts).
func TestWorkerToolListAgentNetwork(t *testing.T) {
	testenv.RequireLandlock(t)
	dir, err := os.MkdirTemp("", "vtl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rl, err := receipts.Open(filepath.Join(dir, "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	nb, err := agentnet.New(agentnet.Options{StateDir: filepath.Join(dir, "state"), Receipts: rl, UID: os.Getuid()})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "an")
	l, err := agentnet.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&agentnet.Server{Broker: nb, UID: os.Getuid()}).Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done; rl.Close() })

	wa, wb := tempWorkspace(t), tempWorkspace(t)
	oneSided := []agentnet.Policy{{Workspace: wa, Enabled: true, Peers: []string{wb}}, {Workspace: wb, Enabled: true}}
	mutual := []agentnet.Policy{{Workspace: wa, Enabled: true, Peers: []string{wb}}, {Workspace: wb, Enabled: true, Peers: []string{wa}}}
	if err := nb.SetPolicies(oneSided); err != nil {
		t.Fatal(err)
	}
	client := agentnet.NewClient(sock)
	defer client.Close()
	tb, _, err := client.Register(ctx, wb)
	if err != nil {
		t.Fatal(err)
	}
	tool := &agentnet.Tool{Task: &agentnet.Task{Client: client, Workspace: wa}}
	if _, err := tool.Task.Register(ctx); err != nil {
		t.Fatal(err)
	}
	defer tool.Task.Close(context.Background())

	cfg := config.Default()
	b, _, err := launch.Registry(cfg, nil).Resolve(sandbox.Landlock, cfg.Sandbox.Mode)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := broker.Start(ctx, broker.Options{Config: cfg, Workspace: wa, Backend: b, Executable: workerExecutable, HostTools: []broker.HostTool{tool}})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	scan := func(what string, data []byte) {
		t.Helper()
		if tool.Task.Leaks(data) || strings.Contains(string(data), "vakan1.") {
			t.Fatalf("%s carries the task token: %s", what, data)
		}
	}
	listed := func(want bool) {
		t.Helper()
		if _, err := tool.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		tools, err := sess.Tools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(tools, wire.OpBash) || slices.Contains(tools, wire.ToolAgentNetwork) != want {
			t.Fatalf("tool list %v: agent_network listed should be %v", tools, want)
		}
	}
	call := func(args wire.AgentNetworkArgs) (wire.AgentNetworkResult, error) {
		t.Helper()
		raw, _ := json.Marshal(args)
		data, err := sess.CallHostTool(ctx, wire.ToolAgentNetwork, raw)
		var out wire.AgentNetworkResult
		if err != nil {
			scan("a tool error", []byte(err.Error()))
			return out, err
		}
		scan("a tool result", data)
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
		return out, nil
	}

	// B does not name A: no edge, no tool; a call is refused like an
	// unknown op.
	listed(false)
	if _, err := call(wire.AgentNetworkArgs{Op: "peers"}); !errors.Is(err, &wire.Error{Code: wire.CodeProtocol}) {
		t.Fatalf("agent_network while not listed: %v", err)
	}
	// Both name each other: listed, and a message crosses both ways.
	if err := nb.SetPolicies(mutual); err != nil {
		t.Fatal(err)
	}
	listed(true)
	out, err := call(wire.AgentNetworkArgs{Op: "peers"})
	if err != nil || len(out.Peers) != 1 || out.Peers[0].Workspace != wb {
		t.Fatalf("peers = %+v, %v", out, err)
	}
	if _, err := call(wire.AgentNetworkArgs{Op: "send", Peer: wb, Topic: "t", Message: "from the session"}); err != nil {
		t.Fatal(err)
	}
	if m, err := client.Receive(ctx, tb, "t", "", 0); err != nil || string(m.Body) != "from the session" {
		t.Fatalf("B received %+v, %v", m, err)
	}
	if _, err := client.Send(ctx, tb, wa, "u", []byte("to the session")); err != nil {
		t.Fatal(err)
	}
	if out, err := call(wire.AgentNetworkArgs{Op: "receive", Topic: "u", WaitSeconds: 5}); err != nil || out.Message == nil || out.Message.Message != "to the session" {
		t.Fatalf("receive = %+v, %v", out, err)
	}
	for _, bad := range []string{`{"op":"peers","token":"x"}`, `{"op":"bogus"}`, `{"op":"send","peer":"/nonexistent","topic":"t"}`} {
		if _, err := sess.CallHostTool(ctx, wire.ToolAgentNetwork, json.RawMessage(bad)); err == nil {
			t.Fatalf("%s accepted", bad)
		} else {
			scan("a tool error", []byte(err.Error()))
		}
	}
	// The sandbox sees no token.
	res, err := sess.Bash(ctx, wire.BashArgs{Command: `for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; echo; done | tr '\0' '\n'; env`}, nil)
	if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "PATH=") {
		t.Fatalf("dump: %+v %v", res, err)
	}
	scan("the sandbox's processes", []byte(res.Stdout+res.Stderr))
	// A reload drops the edge: the tool disappears.
	if err := nb.SetPolicies(oneSided); err != nil {
		t.Fatal(err)
	}
	listed(false)
}
