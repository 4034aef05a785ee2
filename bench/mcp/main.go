// Command mcp measures the cost of a `vak mcp` tool call, side by side and
// interleaved with the direct worker round trip it wraps:
//
//   - native: the MCP bash tool running `true` over stdio (the SDK's client
//     talking to a `vak mcp` subprocess, warm) vs a bash request for `true`
//     on a running landlock worker (broker session);
//
//   - with -session (needs Docker and vak-test:latest): the MCP bash tool of
//     `vak mcp --session ID` vs Exec of `true` on the same session through
//     its worker socket.
//
//     go run ./bench/mcp -n 200 [-session]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/bench/internal/stats"
	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/sandbox/landlock"
	"vak/internal/taskenv"
	"vak/internal/worker/wire"
)

var labels = map[string]string{"vak.bench": "mcp", "vak.test": "1"}

func main() {
	n := flag.Int("n", 200, "samples per contender")
	session := flag.Bool("session", false, "also measure vak mcp --session against a session's worker socket")
	image := flag.String("image", "vak-test:latest", "session image")
	flag.Parse()
	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	dir, err := os.MkdirTemp(tmp, "vak-bench-ws-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ws, err := paths.CanonicalWorkspace(dir)
	if err != nil {
		log.Fatal(err)
	}
	cfgFile := dir + ".toml"
	os.WriteFile(cfgFile, []byte("version = 1\n[sandbox]\nbackend = \"landlock\"\nimage = \""+*image+"\"\n"), 0o600)
	defer os.Remove(cfgFile)
	ctx := context.Background()

	sess, err := broker.Start(ctx, broker.Options{Config: config.Default(), Workspace: ws, Backend: &landlock.Backend{}, Executable: vak})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	direct := &stats.Sample{Name: "worker round trip: bash true"}
	viaMCP := &stats.Sample{Name: "vak mcp (stdio): bash tool true"}
	cs := connect(vak, "--config", cfgFile, "mcp", "--workspace", ws)
	loop(*n, direct, viaMCP, func() error {
		r, err := sess.Bash(ctx, wire.BashArgs{Command: "true"}, nil)
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("exit %d", r.ExitCode)
		}
		return err
	}, func() error { return callTrue(cs) })
	cs.Close()
	fmt.Printf("### vak mcp, landlock backend (%s/%s, %d cores, n=%d, interleaved; %s)\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), *n, sess.Ready().Sandbox)
	fmt.Print(stats.Table(direct, viaMCP))

	if !*session {
		return
	}
	state, _ := os.MkdirTemp(tmp, "vak-bench-state-")
	defer os.RemoveAll(state)
	os.Setenv("XDG_STATE_HOME", state) // the vak CLI and the manager share it
	m := &taskenv.Manager{Worker: vak, Labels: labels}
	defer m.Close()
	s, err := m.Create(ctx, taskenv.Spec{Task: "mcp-bench", Workspace: ws, BaseImage: *image})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Discard(context.Background())
	sock, err := m.Open(ctx, s.ID())
	if err != nil {
		log.Fatal(err)
	}
	direct = &stats.Sample{Name: "session socket: exec true"}
	viaMCP = &stats.Sample{Name: "vak mcp --session (stdio): bash tool true"}
	cs = connect(vak, "--config", cfgFile, "mcp", "--workspace", ws, "--session", s.ID())
	defer cs.Close()
	loop(*n, direct, viaMCP, func() error {
		_, err := sock.Exec(ctx, taskenv.Command{Argv: []string{"true"}})
		return err
	}, func() error { return callTrue(cs) })
	fmt.Printf("\n### vak mcp --session (image %s, n=%d, interleaved)\n\n", *image, *n)
	fmt.Print(stats.Table(direct, viaMCP))
}

func connect(vak string, args ...string) *sdk.ClientSession {
	cmd := exec.Command(vak, args...)
	cmd.Stderr = nil
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		log.Fatal(err)
	}
	return cs
}

func callTrue(cs *sdk.ClientSession) error {
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}})
	if err != nil {
		return err
	}
	if res.IsError {
		data, _ := json.Marshal(res.Content)
		return fmt.Errorf("tool error: %s", data)
	}
	return nil
}

// loop runs a and b interleaved, n times each after 10 warm-up rounds.
func loop(n int, sa, sb *stats.Sample, a, b func() error) {
	for i := -10; i < n; i++ {
		d1, err := stats.Time(a)
		if err != nil {
			log.Fatal(err)
		}
		d2, err := stats.Time(b)
		if err != nil {
			log.Fatal(err)
		}
		if i >= 0 {
			sa.Add(d1)
			sb.Add(d2)
		}
	}
}
