package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"vak/internal/agentnet"
	"vak/internal/receipts"
	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// TestAgentnetTwoMCPServers: a real `vak agentnet serve` and two real
// `vak mcp` servers in two workspaces (subprocesses, stdio). agent_network
// appears once both are registered, a request/reply crosses the broker,
// no tool result carries a token, and the receipts verify afterwards. The
// send -> receive latency through both servers is logged (-v).
func TestAgentnetTwoMCPServers(t *testing.T) {
	testenv.RequireLandlock(t)
	state, err := os.MkdirTemp("", "vsm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	t.Setenv("XDG_STATE_HOME", state) // for the in-process vakMain calls
	env := append(os.Environ(), "XDG_STATE_HOME="+state)
	wa, wb := tempWorkspace(t), tempWorkspace(t)
	cfg := writeConfig(t, fmt.Sprintf("version = 1\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\nmessages_per_minute = 100000\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\nmessages_per_minute = 100000\n", wa, wb, wb, wa))

	serveErr := wire.NewTailBuffer(64 << 10)
	serve := exec.Command(workerExecutable, "--config", cfg, "agentnet", "serve")
	serve.Env, serve.Stderr = env, serveErr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { serve.Process.Signal(os.Interrupt); serve.Wait() })
	dir := agentnet.Dir(filepath.Join(state, "vak"))
	c := agentnet.NewClient(dir)
	waitUntil(t, "the broker listens", func() bool { _, err := c.Edges(context.Background()); return err == nil })

	ctx := context.Background()
	connect := func(ws string) *sdk.ClientSession {
		stderr := wire.NewTailBuffer(64 << 10)
		cmd := exec.Command(workerExecutable, "--config", cfg, "mcp", "--workspace", ws)
		cmd.Env, cmd.Stderr = env, stderr
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, stderr.String())
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	ca, cb := connect(wa), connect(wb)
	hasTool := func(cs *sdk.ClientSession) bool {
		res, err := cs.ListTools(ctx, nil)
		return err == nil && slices.ContainsFunc(res.Tools, func(tl *sdk.Tool) bool { return tl.Name == "agent_network" })
	}
	waitUntil(t, "agent_network is listed by both servers", func() bool { return hasTool(ca) && hasTool(cb) })

	call := func(cs *sdk.ClientSession, args map[string]any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "agent_network", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(res)
		if strings.Contains(string(data), "vakan1.") {
			t.Fatalf("a tool result carries a token: %s", data)
		}
		if res.IsError {
			t.Fatalf("agent_network %v: %s", args, data)
		}
		var out map[string]any
		data, _ = json.Marshal(res.StructuredContent)
		json.Unmarshal(data, &out)
		return out
	}
	peers := call(ca, map[string]any{"op": "peers"})["peers"].([]any)
	peerB := peers[0].(map[string]any)["id"].(string)
	corr := call(ca, map[string]any{"op": "request", "peer": peerB, "topic": "review", "message": "please review"})["correlation"].(string)
	m := call(cb, map[string]any{"op": "receive", "topic": "review", "wait_seconds": 10})["message"].(map[string]any)
	if m["message"] != "please review" || m["correlation"] != corr {
		t.Fatalf("B got %v", m)
	}
	call(cb, map[string]any{"op": "reply", "correlation": corr, "message": "LGTM"})
	r := call(ca, map[string]any{"op": "receive", "topic": "review", "correlation": corr, "wait_seconds": 10})["message"].(map[string]any)
	if r["message"] != "LGTM" || r["kind"] != "reply" {
		t.Fatalf("A got %v", r)
	}
	// Latency of send -> receive through both servers and the broker.
	var lat []time.Duration
	for range 50 {
		start := time.Now()
		call(ca, map[string]any{"op": "send", "peer": peerB, "topic": "bench", "message": "x"})
		call(cb, map[string]any{"op": "receive", "topic": "bench", "wait_seconds": 10})
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("send->receive through two vak mcp servers: median %v, p90 %v (50 runs)", lat[25], lat[45])

	// Revocation removes the tool (the servers re-check every 2s).
	if code, out, errs := vakMain(t, cfg, "agentnet", "revoke", wb); code != 0 {
		t.Fatalf("revoke: %d %s %s", code, out, errs)
	}
	waitUntil(t, "agent_network disappears after revocation", func() bool { return !hasTool(ca) && !hasTool(cb) })

	serve.Process.Signal(os.Interrupt)
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, serveErr.String())
	}
	code, out, errs := vakMain(t, "", "receipts", "verify", "--key", filepath.Join(agentnet.ReceiptsKeyDir(dir), receipts.PubKeyFile), agentnet.ReceiptsFile(dir))
	if code != 0 {
		t.Fatalf("receipts verify: %d %s %s", code, out, errs)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAgentnetMCPStartsBroker: with no broker running, two real `vak mcp`
// servers (subprocesses) in two workspaces whose policies name each other
// start one on demand (detached, in a session of its own, logging to
// <state>/agentnet/broker.log) and both list agent_network. When that
// broker dies (SIGKILL: socket and pid file left behind), the servers
// start a new one and register again: the tool comes back and a message
// crosses it.
func TestAgentnetMCPStartsBroker(t *testing.T) {
	testenv.RequireLandlock(t)
	state, err := os.MkdirTemp("", "vso")
	if err != nil {
		t.Fatal(err)
	}
	dir := agentnet.Dir(filepath.Join(state, "vak"))
	t.Cleanup(func() {
		stopBrokerByPID(t, dir)
		os.RemoveAll(state)
	})
	env := append(os.Environ(), "XDG_STATE_HOME="+state)
	wa, wb := tempWorkspace(t), tempWorkspace(t)
	cfg := writeConfig(t, fmt.Sprintf("version = 1\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n", wa, wb, wb, wa))
	c := agentnet.NewClient(dir)
	defer c.Close()
	if err := c.Ping(context.Background()); err == nil {
		t.Fatal("control: a broker answers before any client started one")
	}
	ctx := context.Background()
	var servers []*sdk.ClientSession
	for _, ws := range []string{wa, wb} {
		stderr := wire.NewTailBuffer(64 << 10)
		cmd := exec.Command(workerExecutable, "--config", cfg, "mcp", "--workspace", ws)
		cmd.Env, cmd.Stderr = env, stderr
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, stderr.String())
		}
		t.Cleanup(func() { cs.Close() })
		servers = append(servers, cs)
	}
	hasTool := func(cs *sdk.ClientSession) bool {
		res, err := cs.ListTools(ctx, nil)
		return err == nil && slices.ContainsFunc(res.Tools, func(tl *sdk.Tool) bool { return tl.Name == "agent_network" })
	}
	both := func() bool { return hasTool(servers[0]) && hasTool(servers[1]) }
	waitUntil(t, "both servers list agent_network (a broker was started)", both)
	pid := brokerPIDFile(t, dir)
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Fatalf("the broker (pid %d) is in session %d (%v), not its own", pid, sid, err)
	}
	if st, err := os.Stat(agentnet.LogFile(dir)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("broker log: %v %v", st, err)
	}
	if es, err := c.Edges(ctx); err != nil || len(es) != 1 || !es[0].Up {
		t.Fatalf("edges: %+v %v", es, err)
	}

	// The broker dies; the servers notice within their refresh, start a
	// new one and register again.
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a new broker runs", func() bool {
		data, err := os.ReadFile(agentnet.PIDFile(dir))
		return err == nil && strings.TrimSpace(string(data)) != strconv.Itoa(pid) && c.Ping(ctx) == nil
	})
	waitUntil(t, "both servers list agent_network again", func() bool {
		es, err := c.Edges(ctx)
		return err == nil && len(es) == 1 && es[0].Up && both()
	})
	res, err := servers[0].CallTool(ctx, &sdk.CallToolParams{Name: "agent_network", Arguments: map[string]any{"op": "send", "peer": wb, "topic": "t", "message": "after restart"}})
	if err != nil || res.IsError {
		t.Fatalf("send through the restarted broker: %v %+v", err, res)
	}
	res, err = servers[1].CallTool(ctx, &sdk.CallToolParams{Name: "agent_network", Arguments: map[string]any{"op": "receive", "topic": "t", "wait_seconds": 10}})
	if err != nil || res.IsError {
		t.Fatalf("receive through the restarted broker: %v %+v", err, res)
	}
	data, _ := json.Marshal(res)
	if !strings.Contains(string(data), "after restart") || strings.Contains(string(data), "vakan1.") {
		t.Fatalf("receive: %s", data)
	}
}

// brokerPIDFile is the running broker's pid.
func brokerPIDFile(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(agentnet.PIDFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// stopBrokerByPID ends a broker a test caused to be started, by the pid it
// wrote, and waits for it to exit.
func stopBrokerByPID(t *testing.T, dir string) {
	data, err := os.ReadFile(agentnet.PIDFile(dir))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return
	}
	unix.Kill(pid, unix.SIGTERM)
	waitUntil(t, "the broker exits", func() bool { return unix.Kill(pid, 0) != nil })
}
