package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/testenv"
	"vak/internal/testenv/mockmodel"
)

// EnvCodex names the Codex CLI's native binary (from the npm package
// @openai/codex: node_modules/@openai/codex-linux-x64/vendor/*/bin/codex);
// without it `codex` is looked up on PATH. EnvRequireCodex=1 makes its
// absence a failure.
const (
	EnvCodex        = "VAK_TEST_CODEX"
	EnvRequireCodex = "VAK_REQUIRE_CODEX"
)

// TestMCPWithCodex drives the real, unmodified Codex CLI with `vak mcp` as
// its MCP server, against a local mock of its model API that asks for one
// vak bash call: the call must have run in the sandbox (it wrote the
// workspace; it could not read a canary in the home directory).
func TestMCPWithCodex(t *testing.T) {
	testenv.RequireLandlock(t)
	codex := codexCLI(t)
	ws := tempWorkspace(t)
	home := t.TempDir()
	canary := filepath.Join(home, ".ssh", "id_canary")
	os.MkdirAll(filepath.Dir(canary), 0o700)
	if err := os.WriteFile(canary, []byte("CANARY-HOME-SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Control: the canary is readable outside the sandbox.
	if data, err := os.ReadFile(canary); err != nil || !strings.Contains(string(data), "CANARY") {
		t.Fatalf("control: %v", err)
	}
	command := "echo written-by-codex > via-codex.txt; cat " + canary + "; echo cat-status=$?"
	var offered []mockmodel.Tool
	mock := mockmodel.Start(t, func(n int, r mockmodel.Request) []mockmodel.Item {
		if n > 0 {
			return []mockmodel.Item{{Text: "done"}}
		}
		offered = r.Tools
		for _, tool := range r.Tools {
			if strings.Contains(tool.Namespace+tool.Name, "vak") && strings.HasSuffix(tool.Name, "bash") {
				args, _ := json.Marshal(map[string]any{"command": command})
				return []mockmodel.Item{{Namespace: tool.Namespace, Name: tool.Name, Arguments: string(args)}}
			}
		}
		return []mockmodel.Item{{Text: "no vak bash tool offered"}}
	})
	cfg := writeConfig(t, "version = 1\n")
	codexHome := filepath.Join(home, ".codex")
	os.MkdirAll(codexHome, 0o700)
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	toml := `model = "mock-model"
model_provider = "mock"
approval_policy = "never"

[model_providers.mock]
name = "mock"
base_url = ` + q(mock.URL) + `
wire_api = "responses"
env_key = "MOCK_MODEL_KEY"

[mcp_servers.vak]
command = ` + q(workerExecutable) + `
args = [` + strings.Join([]string{q("--config"), q(cfg), q("mcp"), q("--workspace"), q(ws)}, ", ") + `]
default_tools_approval_mode = "approve"
`
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, codex, "exec", "--skip-git-repo-check", "-C", ws, "run the check with the vak bash tool")
	cmd.Env = []string{"HOME=" + home, "CODEX_HOME=" + codexHome, "PATH=" + os.Getenv("PATH"), "MOCK_MODEL_KEY=test-key", "RUST_LOG=warn"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("codex exec: %v\n%s", err, out)
	}
	reqs := mock.Requests()
	if len(reqs) < 2 || len(reqs[1].Outputs) == 0 {
		t.Fatalf("the model never got a tool result (tools offered: %v)\ncodex output:\n%s", offered, out)
	}
	result := reqs[1].Outputs[len(reqs[1].Outputs)-1]
	t.Logf("the vak tool's result as Codex passed it to the model: %s", result)
	if data, err := os.ReadFile(filepath.Join(ws, "via-codex.txt")); err != nil || string(data) != "written-by-codex\n" {
		t.Fatalf("the tool call did not write the workspace: %v %q\ntool result: %s\ncodex output:\n%s", err, data, result, out)
	}
	if strings.Contains(result, "CANARY-HOME-SECRET") || !strings.Contains(result, "cat-status=1") {
		t.Fatalf("the tool call read the home canary or did not run as expected: %s", result)
	}
}
