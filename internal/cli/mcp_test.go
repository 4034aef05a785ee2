package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pelletier/go-toml/v2"

	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// TestMCPStdio runs `vak mcp` as a real subprocess and talks to it with the
// SDK's client over its stdin/stdout (any stray byte on stdout would break
// the protocol).
func TestMCPStdio(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	if err := os.WriteFile(canary, []byte("CANARY-SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(canary); err != nil || string(data) != "CANARY-SECRET" {
		t.Fatalf("control: canary unreadable outside the sandbox: %v", err)
	}
	stderr := wire.NewTailBuffer(64 << 10)
	cmd := exec.Command(workerExecutable, "--config", cfg, "mcp", "--workspace", ws)
	cmd.Stderr = stderr
	ctx := context.Background()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\nstderr: %s", err, stderr.String())
	}
	defer func() {
		if err := cs.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"bash", "edit_file", "glob", "grep", "read_file", "write_file"}) {
		t.Fatalf("tools = %v", names)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo made > made.txt; cat " + canary}})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	data, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(data, &out)
	if res.IsError || out.ExitCode == 0 || strings.Contains(out.Stdout, "CANARY") {
		t.Fatalf("bash: the canary outside the workspace was readable or the call failed: %s", data)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "made.txt")); string(got) != "made\n" {
		t.Fatalf("bash did not write the workspace: %q", got)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": canary}})
	if err != nil || !res.IsError {
		t.Fatalf("read_file of %s outside the workspace: %v %+v", canary, err, res)
	}
	if !strings.Contains(stderr.String(), "serving MCP on stdio") {
		t.Errorf("no startup log on stderr: %s", stderr.String())
	}
}

func TestMCPPrintConfig(t *testing.T) {
	ws := tempWorkspace(t)
	for _, client := range mcpClients {
		t.Run(client, func(t *testing.T) {
			code, out, errs := vakMain(t, "", "mcp", "--workspace", ws, "--mode", "read-only", "--print-config", client)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var server struct {
				Command string   `json:"command" toml:"command"`
				Args    []string `json:"args" toml:"args"`
			}
			if client == "codex" {
				var c struct {
					MCPServers map[string]*struct {
						Command string   `toml:"command"`
						Args    []string `toml:"args"`
					} `toml:"mcp_servers"`
				}
				if err := toml.Unmarshal([]byte(out), &c); err != nil || c.MCPServers["vak"] == nil {
					t.Fatalf("not a codex config: %v\n%s", err, out)
				}
				server.Command, server.Args = c.MCPServers["vak"].Command, c.MCPServers["vak"].Args
			} else {
				var c struct {
					MCPServers map[string]json.RawMessage `json:"mcpServers"`
				}
				if err := json.Unmarshal([]byte(out), &c); err != nil || c.MCPServers["vak"] == nil {
					t.Fatalf("not JSON with mcpServers.vak: %v\n%s", err, out)
				}
				json.Unmarshal(c.MCPServers["vak"], &server)
			}
			want := []string{"mcp", "--workspace", ws, "--mode", "read-only"}
			if !filepath.IsAbs(server.Command) || !slices.Equal(server.Args, want) {
				t.Fatalf("server = %+v, want an absolute command with args %v", server, want)
			}
		})
	}
	if code, _, errs := vakMain(t, "", "mcp", "--workspace", ws, "--print-config", "vscode"); code != ExitUsage || !strings.Contains(errs, "claude, codex, cursor, gemini") {
		t.Fatalf("unknown client: exit %d: %s", code, errs)
	}
}
