package cli

import (
	"crypto/tls"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"vak/internal/egress/egresstest"
	"vak/internal/testenv"
	"vak/internal/testenv/mockmodel"
)

// TestRunProxiedCodex runs the real, unmodified Codex CLI non-interactively
// inside `vak run --network proxied` on the native backend, against a local
// mock of its model API reachable only through the gateway. The mock asks
// for one shell tool call, then ends. The mock must have received the real
// API key while the sandbox held only the placeholder; the tool call must
// have run inside the sandbox (it wrote the workspace, it could not read a
// canary in the real home); a request to any other host was refused.
func TestRunProxiedCodex(t *testing.T) {
	testenv.RequireLandlock(t)
	codex := os.Getenv(EnvCodex)
	if codex == "" {
		codex, _ = exec.LookPath("codex")
	}
	if codex == "" {
		testenv.Missing(t, EnvRequireCodex, "no Codex CLI (npm install @openai/codex; set "+EnvCodex+" to its native binary)")
	}
	codex, err := filepath.EvalSymlinks(codex)
	if err != nil {
		t.Fatal(err)
	}
	const realKey = "sk-vak-test-real-codex-key-0123456789"
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("VAKTEST_CODEX_KEY", realKey)
	home := t.TempDir()
	t.Setenv("HOME", home)
	canary := filepath.Join(home, ".ssh", "id_canary")
	os.MkdirAll(filepath.Dir(canary), 0o700)
	if err := os.WriteFile(canary, []byte("CANARY-HOME-SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(canary); err != nil || !strings.Contains(string(data), "CANARY") {
		t.Fatalf("control: the canary is readable outside the sandbox: %v", err)
	}
	t.Cleanup(func() { stopOnDemand(t) })

	ws := tempWorkspace(t)
	// The tool prints only whether the key is a placeholder, not the
	// placeholder itself: the output goes back to the model API in the next
	// request's body, where the gateway refuses a placeholder (secrets are
	// injected into headers only, by default).
	command := "case \"$MOCK_MODEL_KEY\" in vakph_*) echo key-is-a-placeholder;; *) echo key-is-not-a-placeholder;; esac; echo written-by-codex > via-codex.txt; cat " + canary + "; echo cat-status=$?; " +
		"curl -sS --max-time 10 https://example.com/; echo; echo other-rc=$?"
	var offered []mockmodel.Tool
	// The model API over TLS with a test CA only the gateway trusts: Codex
	// talks TLS to the gateway (its CA trusted through the environment vak
	// sets), and placeholders are substituted only over TLS.
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	mockTLS := &tls.Config{Certificates: []tls.Certificate{ca.Cert(t, "model.test")}}
	mock := mockmodel.StartOn(t, egresstest.Listen(t, "127.0.0.2", 0), mockTLS, func(n int, r mockmodel.Request) []mockmodel.Item {
		if n > 0 {
			return []mockmodel.Item{{Text: "done"}}
		}
		offered = r.Tools
		for _, tool := range r.Tools {
			if tool.Namespace != "" {
				continue
			}
			var args []byte
			switch tool.Name {
			case "shell":
				args, _ = json.Marshal(map[string]any{"command": []string{"sh", "-c", command}})
			case "exec_command":
				args, _ = json.Marshal(map[string]any{"cmd": command})
			case "shell_command":
				args, _ = json.Marshal(map[string]any{"command": command})
			default:
				continue
			}
			return []mockmodel.Item{{Name: tool.Name, Arguments: string(args)}}
		}
		return []mockmodel.Item{{Text: "no shell tool offered"}}
	})
	port := mock.URL[strings.LastIndex(mock.URL, ":")+1 : strings.LastIndex(mock.URL, "/v1")]
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("mock URL %s", mock.URL)
	}
	cfg := writeConfig(t, `version = 1
[sandbox]
read = [`+strconv.Quote(filepath.Dir(codex))+`]
[network]
policy = "proxied"
[[network.rules]]
name = "model api"
hosts = ["model.test"]
cidrs = ["127.0.0.2/32"]
[network.dns.overrides]
"model.test" = ["127.0.0.2"]
[gateway]
extra_ca_bundles = [`+strconv.Quote(caFile)+`]
[secrets.MOCK_MODEL_KEY]
env = "VAKTEST_CODEX_KEY"
hosts = ["model.test"]
`)
	codexHome := filepath.Join(ws, ".codexhome")
	os.MkdirAll(codexHome, 0o700)
	toml := `model = "mock-model"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.mock]
name = "mock"
base_url = "https://model.test:` + port + `/v1"
wire_api = "responses"
env_key = "MOCK_MODEL_KEY"
`
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--network", "proxied", "--",
		"sh", "-c", "CODEX_HOME="+codexHome+" RUST_LOG=warn exec "+codex+" exec --skip-git-repo-check -C "+ws+" 'run the check with the shell tool'")
	if strings.Contains(out+errs, realKey) {
		t.Fatalf("the real key appears in vak run's output:\n%s\n%s", out, errs)
	}
	reqs := mock.Requests()
	if len(reqs) == 0 {
		t.Fatalf("the mock model got no request (exit %d)\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if got := reqs[0].Authorization; got != "Bearer "+realKey {
		t.Errorf("the model API received Authorization %q, want the real key", got)
	}
	if len(reqs) < 2 || len(reqs[1].Outputs) == 0 {
		t.Fatalf("the model never got a tool result (tools offered: %v; exit %d)\nstdout:\n%s\nstderr:\n%s", offered, code, out, errs)
	}
	result := reqs[1].Outputs[len(reqs[1].Outputs)-1]
	t.Logf("the shell tool's result as Codex passed it to the model: %s", result)
	if !strings.Contains(result, "key-is-a-placeholder") || strings.Contains(result, realKey) {
		t.Errorf("the sandbox env did not hold (only) the placeholder: %s", result)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "via-codex.txt")); err != nil || string(data) != "written-by-codex\n" {
		t.Errorf("the tool call did not write the workspace: %v %q", err, data)
	}
	if strings.Contains(result, "CANARY-HOME-SECRET") || strings.Contains(result, "cat-status=0") {
		t.Errorf("the tool call read the home canary: %s", result)
	}
	if !strings.Contains(result, "403 Forbidden") || !strings.Contains(result, "example.com") {
		t.Errorf("a request to another host was not refused by the gateway: %s", result)
	}
	if code != 0 {
		t.Errorf("vak run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}
