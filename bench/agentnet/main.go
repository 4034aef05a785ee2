// Command agentnet measures the brokered workspace network (issue 18):
//
//   - latency (default): send -> receive across a live edge, interleaved,
//     through two real `vak mcp` servers (stdio, the SDK's client) and the
//     broker (`vak agentnet serve`), against the same pair of operations
//     straight on the broker socket with the client's reused connection,
//     and with a new connection per call (how the client worked before);
//
//   - -memory: 50 edges x 1,000 queued 256-byte messages: the heap of an
//     in-process broker (after GC) and the resident set of a real broker
//     process, empty, full, after 50,000 further sends that the queue-depth
//     quota refuses, and after the queues are drained.
//
//     go run ./bench/agentnet -n 300
//     go run ./bench/agentnet -memory
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/bench/internal/stats"
	"vak/internal/agentnet"
	"vak/internal/receipts"
)

func main() {
	n := flag.Int("n", 300, "samples per contender")
	memory := flag.Bool("memory", false, "measure broker memory with full queues instead of latency")
	flag.Parse()
	if *memory {
		inProcessMemory()
		processMemory()
		return
	}
	latency(*n)
}

// setup is a state dir, workspaces and a user config whose policies name
// hub and every other workspace as peers of each other.
type setup struct {
	base, state, cfg string
	ws               []string
	env              []string
}

func newSetup(peers int, quota string) *setup {
	base, err := os.MkdirTemp("", "vab") // short: unix socket paths are limited
	if err != nil {
		log.Fatal(err)
	}
	base, _ = filepath.EvalSymlinks(base)
	s := &setup{base: base, state: filepath.Join(base, "s"), cfg: filepath.Join(base, "config.toml")}
	for i := 0; i <= peers; i++ {
		d := filepath.Join(base, fmt.Sprintf("w%d", i))
		os.Mkdir(d, 0o755)
		s.ws = append(s.ws, d)
	}
	var b strings.Builder
	b.WriteString("version = 1\n")
	q, _ := json.Marshal(s.ws[1:])
	fmt.Fprintf(&b, "[[agent_network.workspace]]\npath = %q\npeers = %s\n%s\n", s.ws[0], q, quota)
	for _, w := range s.ws[1:] {
		fmt.Fprintf(&b, "[[agent_network.workspace]]\npath = %q\npeers = [%q]\n%s\n", w, s.ws[0], quota)
	}
	os.WriteFile(s.cfg, []byte(b.String()), 0o600)
	s.env = append(os.Environ(), "XDG_STATE_HOME="+s.state)
	return s
}

func (s *setup) dir() string { return agentnet.Dir(filepath.Join(s.state, "vak")) }

// serve starts `vak agentnet serve` and waits until it answers.
func (s *setup) serve(vak string) *exec.Cmd {
	cmd := exec.Command(vak, "--config", s.cfg, "agentnet", "serve")
	cmd.Env = s.env
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	c := agentnet.NewClient(s.dir())
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); c.Ping(context.Background()) != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatal("the broker did not come up")
		}
	}
	return cmd
}

func (s *setup) close(broker *exec.Cmd) {
	if broker != nil {
		broker.Process.Signal(os.Interrupt)
		broker.Wait()
	}
	os.RemoveAll(s.base)
}

func latency(n int) {
	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	s := newSetup(1, "messages_per_minute = 100000")
	broker := s.serve(vak)
	defer s.close(broker)
	ctx := context.Background()

	// Direct: the tasks of two other processes would be these two clients.
	c := agentnet.NewClient(s.dir())
	defer c.Close()
	ta, _, err := c.Register(ctx, s.ws[0])
	if err != nil {
		log.Fatal(err)
	}
	tb, _, err := c.Register(ctx, s.ws[1])
	if err != nil {
		log.Fatal(err)
	}
	body := []byte("x")
	direct := &stats.Sample{Name: "broker socket, reused connection"}
	dial := &stats.Sample{Name: "broker socket, new connection per call"}
	viaMCP := &stats.Sample{Name: "two vak mcp servers (stdio)"}

	connect := func(ws string) *sdk.ClientSession {
		cmd := exec.Command(vak, "--config", s.cfg, "mcp", "--workspace", ws)
		cmd.Env = s.env
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
		if err != nil {
			log.Fatal(err)
		}
		return cs
	}
	ca, cb := connect(s.ws[0]), connect(s.ws[1])
	defer ca.Close()
	defer cb.Close()
	for deadline := time.Now().Add(30 * time.Second); !hasTool(ca) || !hasTool(cb); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatal("agent_network did not appear")
		}
	}
	call := func(cs *sdk.ClientSession, args map[string]any) error {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "agent_network", Arguments: args})
		if err != nil {
			return err
		}
		if res.IsError {
			data, _ := json.Marshal(res.Content)
			return fmt.Errorf("tool error: %s", data)
		}
		return nil
	}
	contenders := []struct {
		s  *stats.Sample
		fn func() error
	}{
		{direct, func() error {
			if _, err := c.Send(ctx, ta, s.ws[1], "d", body); err != nil {
				return err
			}
			_, err := c.Receive(ctx, tb, "d", "", 10*time.Second)
			return err
		}},
		{dial, func() error {
			c1 := agentnet.NewClient(s.dir())
			_, err := c1.Send(ctx, ta, s.ws[1], "n", body)
			c1.Close()
			if err != nil {
				return err
			}
			c2 := agentnet.NewClient(s.dir())
			defer c2.Close()
			_, err = c2.Receive(ctx, tb, "n", "", 10*time.Second)
			return err
		}},
		{viaMCP, func() error {
			if err := call(ca, map[string]any{"op": "send", "peer": s.ws[1], "topic": "m", "message": "x"}); err != nil {
				return err
			}
			return call(cb, map[string]any{"op": "receive", "topic": "m", "wait_seconds": 10})
		}},
	}
	for i := -20; i < n; i++ {
		for _, ct := range contenders {
			d, err := stats.Time(ct.fn)
			if err != nil {
				log.Fatal(err)
			}
			if i >= 0 {
				ct.s.Add(d)
			}
		}
	}
	fmt.Printf("### agent network: send -> receive (%s/%s, %d cores, n=%d, interleaved)\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), n)
	fmt.Print(stats.Table(direct, dial, viaMCP))
}

func hasTool(cs *sdk.ClientSession) bool {
	res, err := cs.ListTools(context.Background(), nil)
	return err == nil && slices.ContainsFunc(res.Tools, func(t *sdk.Tool) bool { return t.Name == "agent_network" })
}

const (
	edges = 50
	depth = 1000
	size  = 256
)

// fill sends depth messages from every spoke to the hub and returns how
// many were refused.
func fill(send func(tok, to string) error, toks []string, hub string) int {
	refused := 0
	for _, t := range toks {
		for range depth {
			if send(t, hub) != nil {
				refused++
			}
		}
	}
	return refused
}

// drain receives every queued message.
func drain(recv func() error) int {
	got := 0
	for recv() == nil {
		got++
	}
	return got
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func inProcessMemory() {
	s := newSetup(edges, fmt.Sprintf("messages_per_minute = 100000\nmax_message_bytes = \"%d\"\nqueue_depth = %d", size, depth))
	defer s.close(nil)
	logPath := filepath.Join(s.base, "receipts.jsonl")
	rl, err := receipts.Open(logPath)
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()
	b, err := agentnet.New(agentnet.Options{StateDir: filepath.Join(s.base, "an"), Receipts: rl, UID: os.Getuid()})
	if err != nil {
		log.Fatal(err)
	}
	var ps []agentnet.Policy
	q := agentnet.Quota{PerMinute: 100000, MaxBytes: size, QueueDepth: depth}
	ps = append(ps, agentnet.Policy{Workspace: s.ws[0], Enabled: true, Peers: s.ws[1:], Quota: q})
	for _, w := range s.ws[1:] {
		ps = append(ps, agentnet.Policy{Workspace: w, Enabled: true, Peers: []string{s.ws[0]}, Quota: q})
	}
	if err := b.SetPolicies(ps); err != nil {
		log.Fatal(err)
	}
	hubTok, _, err := b.Register(s.ws[0], os.Getuid())
	if err != nil {
		log.Fatal(err)
	}
	var toks []string
	for _, w := range s.ws[1:] {
		t, _, err := b.Register(w, os.Getuid())
		if err != nil {
			log.Fatal(err)
		}
		toks = append(toks, t)
	}
	msg := make([]byte, size)
	send := func(tok, to string) error { _, err := b.Send(tok, to, "t", msg); return err }
	recv := func() error {
		_, err := b.Receive(context.Background(), hubTok, "t", "", 0)
		return err
	}
	rl.Sync()
	base := heap()
	if r := fill(send, toks, s.ws[0]); r != 0 {
		log.Fatalf("%d sends refused while filling", r)
	}
	rl.Sync()
	full := heap()
	refused := fill(send, toks, s.ws[0])
	rl.Sync()
	after := heap()
	got := drain(recv)
	rl.Sync()
	drained := heap()
	fmt.Printf("### agent network broker memory, in process (heap after GC; %d edges x %d queued %d-byte messages)\n\n", edges, depth, size)
	fmt.Println("| state | heap |\n|---|---|")
	fmt.Printf("| registered, queues empty | %.1f MiB |\n", mib(base))
	fmt.Printf("| %d messages queued | %.1f MiB (+%.1f MiB, %d B per message) |\n", edges*depth, mib(full), mib(full-base), int(full-base)/(edges*depth))
	fmt.Printf("| + %d sends refused by the queue depth (%d refused) | %.1f MiB |\n", edges*depth, refused, mib(after))
	fmt.Printf("| drained (%d received) | %.1f MiB |\n\n", got, mib(drained))
}

func processMemory() {
	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	s := newSetup(edges, fmt.Sprintf("messages_per_minute = 100000\nmax_message_bytes = \"%d\"\nqueue_depth = %d", size, depth))
	broker := s.serve(vak)
	defer s.close(broker)
	ctx := context.Background()
	c := agentnet.NewClient(s.dir())
	defer c.Close()
	hubTok, _, err := c.Register(ctx, s.ws[0])
	if err != nil {
		log.Fatal(err)
	}
	var toks []string
	for _, w := range s.ws[1:] {
		t, _, err := c.Register(ctx, w)
		if err != nil {
			log.Fatal(err)
		}
		toks = append(toks, t)
	}
	msg := make([]byte, size)
	send := func(tok, to string) error { _, err := c.Send(ctx, tok, to, "t", msg); return err }
	recv := func() error { _, err := c.Receive(ctx, hubTok, "t", "", 0); return err }
	rss := func() uint64 {
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", broker.Process.Pid))
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb uint64
			if _, err := fmt.Sscanf(sc.Text(), "VmRSS: %d kB", &kb); err == nil {
				return kb << 10
			}
		}
		log.Fatal("no VmRSS")
		return 0
	}
	base := rss()
	if r := fill(send, toks, s.ws[0]); r != 0 {
		log.Fatalf("%d sends refused while filling", r)
	}
	full := rss()
	refused := fill(send, toks, s.ws[0])
	after := rss()
	got := drain(recv)
	drained := rss()
	fmt.Printf("### agent network broker memory, `vak agentnet serve` process (VmRSS; same load over its socket)\n\n")
	fmt.Println("| state | resident |\n|---|---|")
	fmt.Printf("| registered, queues empty | %.1f MiB |\n", mib(base))
	fmt.Printf("| %d messages queued | %.1f MiB |\n", edges*depth, mib(full))
	fmt.Printf("| + %d sends refused by the queue depth (%d refused) | %.1f MiB |\n", edges*depth, refused, mib(after))
	fmt.Printf("| drained (%d received) | %.1f MiB |\n", got, mib(drained))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
