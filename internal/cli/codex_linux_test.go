package cli

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"vak/internal/egress/egresstest"
	"vak/internal/receipts"
	"vak/internal/testenv"
	"vak/internal/testenv/mockmodel"
)

// TestRunProxiedCodex runs the real, unmodified Codex CLI non-interactively
// inside `vak run --network proxied` on the native backend, against a local
// mock of its model API reachable only through the gateway (see
// runProxiedCodex for what it asserts).
func TestRunProxiedCodex(t *testing.T) {
	testenv.RequireLandlock(t)
	runProxiedCodex(t, "landlock")
}

// TestRunProxiedCodexDocker is TestRunProxiedCodex on the docker backend:
// the same static Codex binary, copied into the workspace (the only host
// path a docker sandbox sees), runs in the test image's container behind
// the workspace's proxied topology. The mock model API listens on the host
// side of a test Docker network (the docker gateway cannot reach the host's
// loopback), reached through the gateway container only.
func TestRunProxiedCodexDocker(t *testing.T) {
	runProxiedCodex(t, "docker")
}

// runProxiedCodex drives Codex in `vak run --backend BACKEND --network
// proxied`. The mock asks for one shell tool call, then ends. The mock must
// have received the real API key while the sandbox held only the
// placeholder (in its environment and in every file it left); the tool call
// must have run inside the sandbox (it wrote the workspace, it could not
// read a canary in the real home); a request to a host without a rule (one
// that resolves to the mock itself) was refused by the gateway and never
// reached the mock; the gateway wrote one receipt per model request (the
// secret named, its value and placeholder nowhere in the log) and one for
// the refusal; Codex printed the model's final answer.
func runProxiedCodex(t *testing.T, backend string) {
	codex := codexCLI(t)
	docker := backend == "docker"
	var img string
	if docker {
		img = testenv.Image(t)
	}
	const realKey = "sk-vak-test-real-codex-key-0123456789"
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
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

	ws := tempWorkspace(t)
	// The mock's address: a second loopback address for the native
	// backend's on-demand gateway (a host process); for the docker
	// backend's gateway container, the host side of a test network.
	mockIP := "127.0.0.2"
	var runArgs []string
	var runLabel string
	if docker {
		netName := testenv.CreateNetwork(t, testenv.UniqueName("codex-model"))
		mockIP = testenv.Docker(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", netName)
		if net.ParseIP(mockIP).To4() == nil {
			t.Fatalf("test network %s has no IPv4 gateway: %q", netName, mockIP)
		}
		// The binary must be inside the only host path the container
		// sees: the workspace.
		dst := filepath.Join(ws, ".codex-bin", "codex")
		copyFile(t, codex, dst, 0o755)
		codex = dst
		runLabel = "vak.test.run=codex-docker-" + testenv.TestID(t)
		runArgs = []string{"--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", runLabel}
		t.Cleanup(func() { removeLabelled(t, runLabel) })
	} else {
		t.Cleanup(func() { stopOnDemand(t) })
	}
	// The denied request: a host no rule allows, resolving to the mock
	// itself, so only the gateway stands between the request and the mock.
	fetch := "curl -sS --max-time 10"
	if docker {
		fetch = "probe http"
	}
	var offered []mockmodel.Tool
	// The model API over TLS with a test CA only the gateway trusts: Codex
	// talks TLS to the gateway (its CA trusted through the environment vak
	// sets), and placeholders are substituted only over TLS.
	ca := egresstest.NewCA(t)
	caDir := t.TempDir()
	os.Chmod(caDir, 0o755) // the gateway container reads it as another uid
	caFile := ca.WritePEM(t, caDir)
	os.Chmod(caFile, 0o644)
	mockTLS := &tls.Config{Certificates: []tls.Certificate{ca.Cert(t, "model.test")}}
	var command string
	mock := mockmodel.StartOn(t, egresstest.Listen(t, mockIP, 0), mockTLS, func(n int, r mockmodel.Request) []mockmodel.Item {
		if n > 0 {
			return []mockmodel.Item{{Text: "done-by-mock-model"}}
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
	// The tool prints only whether the key is a placeholder, not the
	// placeholder itself: the output goes back to the model API in the next
	// request's body, where the gateway refuses a placeholder (secrets are
	// injected into headers only, by default).
	command = "case \"$MOCK_MODEL_KEY\" in vakph_*) echo key-is-a-placeholder;; *) echo key-is-not-a-placeholder;; esac; echo written-by-codex > via-codex.txt; cat " + canary + "; echo cat-status=$?; " +
		fetch + " https://denied.test:" + port + "/v1/responses; echo; echo other-rc=$?"

	sandbox := "read = [" + strconv.Quote(filepath.Dir(codex)) + "]"
	if docker {
		sandbox = "backend = \"docker\"\nimage = " + strconv.Quote(img)
	}
	cfg := writeConfig(t, `version = 1
[sandbox]
`+sandbox+`
[network]
policy = "proxied"
[[network.rules]]
name = "model api"
hosts = ["model.test"]
cidrs = ["`+mockIP+`/32"]
[network.dns.overrides]
"model.test" = [`+strconv.Quote(mockIP)+`]
"denied.test" = [`+strconv.Quote(mockIP)+`]
[gateway]
extra_ca_bundles = [`+strconv.Quote(caFile)+`]
[secrets.MOCK_MODEL_KEY]
env = "VAKTEST_CODEX_KEY"
hosts = ["model.test"]
[session]
run_network_idle = "0"
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
	args := append([]string{"run"}, runArgs...)
	args = append(args, "-w", ws, "--backend", backend, "--network", "proxied", "--",
		"sh", "-c", "CODEX_HOME="+codexHome+" RUST_LOG=warn exec "+codex+" exec --skip-git-repo-check -C "+ws+" 'run the check with the shell tool'")
	code, out, errs := vakMain(t, cfg, args...)
	if strings.Contains(out+errs, realKey) {
		t.Fatalf("the real key appears in vak run's output:\n%s\n%s", out, errs)
	}
	reqs := mock.Requests()
	if len(reqs) == 0 {
		t.Fatalf("the mock model got no request (exit %d)\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for i, r := range reqs {
		if got := r.Authorization; got != "Bearer "+realKey {
			t.Errorf("model request %d: the model API received Authorization %q, want the real key", i, got)
		}
	}
	if len(reqs) < 2 || len(reqs[1].Outputs) == 0 {
		t.Fatalf("the model never got a tool result (tools offered: %v; exit %d)\nstdout:\n%s\nstderr:\n%s", offered, code, out, errs)
	}
	if len(reqs) != 2 {
		t.Errorf("the mock got %d model requests, want 2 (the tool call, then the final answer): the denied request reached it?", len(reqs))
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
	if !strings.Contains(result, "403") || !strings.Contains(result, "denied.test") {
		t.Errorf("a request to a host without a rule was not refused by the gateway: %s", result)
	}
	if !strings.Contains(out, "done-by-mock-model") {
		t.Errorf("Codex did not print the model's final answer:\n%s", out)
	}
	if code != 0 {
		t.Errorf("vak run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if docker {
		// run_network_idle = "0": the run's container and its topology
		// are gone once vak run returned.
		if left := testenv.Docker(t, "ps", "-aq", "--filter", "label="+runLabel); left != "" {
			t.Errorf("vak run left containers behind: %s", strings.Fields(left))
		}
	}
	// Nothing the sandbox could write (the workspace, Codex's home and
	// session logs in it, the persistent home) holds the real key.
	for _, dir := range []string{ws, filepath.Join(state, "vak", "homes")} {
		if f := fileContaining(t, dir, realKey); f != "" {
			t.Errorf("the real key is in %s, a file the sandbox could read", f)
		}
	}
	checkCodexReceipts(t, filepath.Join(state, "vak", "receipts"), realKey, len(reqs))
}

// checkCodexReceipts checks the gateway's receipts below dir: every log
// verifies; one allow receipt per model request, naming the substituted
// secret; one deny receipt for denied.test; no secret value anywhere.
func checkCodexReceipts(t *testing.T, dir, realKey string, modelRequests int) {
	t.Helper()
	var logs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".jsonl") {
			logs = append(logs, p)
		}
		return nil
	})
	if len(logs) == 0 {
		t.Fatalf("no receipts below %s", dir)
	}
	var allowed, denied int
	for _, l := range logs {
		if _, err := receipts.VerifyFile(l); err != nil {
			t.Errorf("receipts %s: %v", l, err)
		}
		data, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(realKey)) || bytes.Contains(data, []byte("vakph_")) {
			t.Errorf("receipts %s hold a secret value or a placeholder", l)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r receipts.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("receipts %s: %v", l, err)
			}
			switch {
			case r.Host == "model.test" && r.Method == "POST" && strings.HasSuffix(r.Path, "/responses"):
				if r.Decision != receipts.Allow || len(r.Secrets) != 1 || r.Secrets[0] != "MOCK_MODEL_KEY" {
					t.Errorf("model request receipt: %+v", r)
				}
				allowed++
			case r.Host == "denied.test" && r.Protocol != "dns":
				if r.Decision != receipts.Deny || r.Status != 403 {
					t.Errorf("denied request receipt: %+v", r)
				}
				denied++
			}
		}
	}
	if allowed != modelRequests || denied != 1 {
		t.Errorf("receipts: %d allowed model requests (want %d, one per request the mock got), %d refusals of denied.test (want 1)", allowed, modelRequests, denied)
	}
}

// fileContaining returns the first regular file below dir (links not
// followed) that contains s, or "".
func fileContaining(t *testing.T, dir, s string) string {
	t.Helper()
	var found string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		data, _ := io.ReadAll(f)
		if bytes.Contains(data, []byte(s)) {
			found = p
		}
		return nil
	})
	return found
}

// copyFile copies src to dst (creating dst's directory) with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// removeLabelled removes the containers, networks and volumes carrying
// label (KEY=VALUE), containers first.
func removeLabelled(t *testing.T, label string) {
	t.Helper()
	for _, kind := range []string{"container", "network", "volume"} {
		ls := []string{kind, "ls", "-q", "--filter", "label=" + label}
		if kind == "container" {
			ls = []string{kind, "ls", "-aq", "--filter", "label=" + label}
		}
		out, _ := exec.Command("docker", ls...).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			exec.Command("docker", append([]string{kind, "rm", "-f"}, ids...)...).Run()
		}
	}
}
