package mcp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/agentnet"
	"vak/internal/receipts"
	"vak/internal/sandbox"
)

// anBroker runs a real agentnet broker on a socket and returns it with a
// client of it and the receipts log path.
func anBroker(t *testing.T) (*agentnet.Broker, *agentnet.Client, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "anm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	logPath := filepath.Join(dir, "receipts.jsonl")
	log, err := receipts.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := agentnet.New(agentnet.Options{StateDir: filepath.Join(dir, "state"), Receipts: log, UID: os.Getuid()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := agentnet.Listen(filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&agentnet.Server{Broker: b, UID: os.Getuid()}).Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-done
		log.Close()
	})
	return b, agentnet.NewClient(filepath.Join(dir, "s")), logPath
}

// listed reports whether the client's tools/list has agent_network.
func listed(t *testing.T, f *fixture) bool {
	t.Helper()
	res, err := f.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(res.Tools, func(tl *sdk.Tool) bool { return tl.Name == AgentNetToolName })
}

// anCall calls agent_network, fails on a tool error, checks that no token
// is in the result, and decodes it.
func anCall(t *testing.T, f *fixture, args map[string]any) AgentNetOutput {
	t.Helper()
	res := f.call(t, AgentNetToolName, args)
	noToken(t, f, res)
	if res.IsError {
		t.Fatalf("agent_network %v: %s", args, text(res))
	}
	var out AgentNetOutput
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// noToken fails if the result carries the server's task token or any part
// of one (the token's payload or signature).
func noToken(t *testing.T, f *fixture, res *sdk.CallToolResult) {
	t.Helper()
	data, _ := json.Marshal(res)
	if f.srv.AgentNetLeaks(data) {
		t.Fatalf("a tool result contains the task token: %s", data)
	}
	if strings.Contains(string(data), "vakan1.") {
		t.Fatalf("a tool result contains a token: %s", data)
	}
}

// TestAgentNetworkTool: two real MCP servers in two workspaces. The tool
// is absent without a live edge, appears when both policies name each
// other, carries a request/reply end to end, and disappears on revocation.
// Every tool result is scanned for the token.
func TestAgentNetworkTool(t *testing.T) {
	b, client, logPath := anBroker(t)
	fa := newFixture(t, sandbox.WorkspaceWrite, nil)
	fb := newFixture(t, sandbox.WorkspaceWrite, nil)
	ctx := context.Background()
	// B's policy does not name A: no edge, so no tool for either.
	if err := b.SetPolicies([]agentnet.Policy{{Workspace: fa.ws, Enabled: true, Peers: []string{fb.ws}}, {Workspace: fb.ws, Enabled: true}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*fixture{fa, fb} {
		if err := f.srv.AttachAgentNet(ctx, client, nil); err != nil {
			t.Fatal(err)
		}
		if listed(t, f) || slices.Contains(f.srv.Tools(), AgentNetToolName) {
			t.Fatal("agent_network listed without a live edge")
		}
		if _, err := f.cs.CallTool(ctx, &sdk.CallToolParams{Name: AgentNetToolName, Arguments: map[string]any{"op": "peers"}}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
			t.Fatalf("an unlisted agent_network answered: %v", err)
		}
	}
	// Both name each other: the tool appears.
	if err := b.SetPolicies([]agentnet.Policy{{Workspace: fa.ws, Enabled: true, Peers: []string{fb.ws}}, {Workspace: fb.ws, Enabled: true, Peers: []string{fa.ws}}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*fixture{fa, fb} {
		if on, err := f.srv.RefreshAgentNet(ctx); err != nil || !on || !listed(t, f) {
			t.Fatalf("agent_network not listed on a live edge: %v %v", on, err)
		}
	}
	peers := anCall(t, fa, map[string]any{"op": "peers"}).Peers
	if len(peers) != 1 || peers[0].Workspace != fb.ws {
		t.Fatalf("peers = %+v", peers)
	}
	corr := anCall(t, fa, map[string]any{"op": "request", "peer": peers[0].ID, "topic": "build", "message": "does main build?"}).Correlation
	if corr == "" {
		t.Fatal("no correlation id")
	}
	got := anCall(t, fb, map[string]any{"op": "receive", "topic": "build", "wait_seconds": 10}).Message
	if got == nil || got.Kind != "request" || got.Message != "does main build?" || got.Correlation != corr {
		t.Fatalf("B received %+v", got)
	}
	anCall(t, fb, map[string]any{"op": "reply", "correlation": corr, "message": "yes"})
	rep := anCall(t, fa, map[string]any{"op": "receive", "topic": "build", "correlation": corr, "wait_seconds": 10}).Message
	if rep == nil || rep.Kind != "reply" || rep.Message != "yes" {
		t.Fatalf("A received %+v", rep)
	}
	if out := anCall(t, fa, map[string]any{"op": "receive", "topic": "build"}); !out.TimedOut {
		t.Fatalf("empty receive: %+v", out)
	}
	// Refusals name the reason and carry no token.
	for _, args := range []map[string]any{
		{"op": "send", "peer": fa.ws, "topic": "t", "message": "self"},
		{"op": "send", "peer": "/nonexistent", "topic": "t"},
		{"op": "reply", "correlation": "corr-unknown", "message": "x"},
		{"op": "bogus"},
	} {
		res := fa.call(t, AgentNetToolName, args)
		noToken(t, fa, res)
		if !res.IsError {
			t.Fatalf("%v accepted", args)
		}
	}
	// Revoking B closes the edge: a waiting receive fails, and after a
	// refresh the tool is gone from both servers.
	waitErr := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, _ := fa.cs.CallTool(ctx, &sdk.CallToolParams{Name: AgentNetToolName, Arguments: map[string]any{"op": "receive", "topic": "t", "wait_seconds": 60}})
		waitErr <- res
	}()
	deadline := time.Now().Add(10 * time.Second)
	for b.Waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the receive never waited")
		}
		time.Sleep(time.Millisecond)
	}
	if n, err := client.Revoke(ctx, fb.ws); err != nil || n != 1 {
		t.Fatalf("revoke = %d, %v", n, err)
	}
	if res := <-waitErr; res == nil || !res.IsError || !strings.Contains(text(res), "revoked") {
		t.Fatalf("waiting receive after revocation: %+v", res)
	} else {
		noToken(t, fa, res)
	}
	for _, f := range []*fixture{fa, fb} {
		if on, _ := f.srv.RefreshAgentNet(ctx); on || listed(t, f) {
			t.Fatal("agent_network still listed after revocation")
		}
	}
	fa.srv.Close()
	fb.srv.Close()
	rep2, err := receipts.VerifyFile(logPath)
	if err != nil || !rep2.OK() {
		t.Fatalf("receipts: %v %+v", err, rep2)
	}
	data, _ := os.ReadFile(logPath)
	for _, want := range []string{`"method":"request"`, `"method":"reply"`, `"method":"deliver"`, `"method":"revoke"`, `"method":"edge-down"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("receipts lack %s", want)
		}
	}
}
