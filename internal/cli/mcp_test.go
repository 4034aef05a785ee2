package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pelletier/go-toml/v2"

	"vak/internal/mcp"
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
	for _, client := range mcp.Clients {
		t.Run(client, func(t *testing.T) {
			code, out, errs := vakMain(t, "", "mcp", "--workspace", ws, "--mode", "read-only", "--home", "profile:mcp", "--print-config", client)
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
			want := []string{"mcp", "--workspace", ws, "--mode", "read-only", "--home", "profile:mcp"}
			if !filepath.IsAbs(server.Command) || !slices.Equal(server.Args, want) {
				t.Fatalf("server = %+v, want an absolute command with args %v", server, want)
			}
		})
	}
	if code, _, errs := vakMain(t, "", "mcp", "--workspace", ws, "--print-config", "vscode"); code != ExitUsage || !strings.Contains(errs, "claude, codex, cursor, gemini") {
		t.Fatalf("unknown client: exit %d: %s", code, errs)
	}
}

// mcpClient starts `vak ARGS...` as an MCP server subprocess and connects.
func mcpClient(t *testing.T, args ...string) (*sdk.ClientSession, *wire.TailBuffer) {
	t.Helper()
	stderr := wire.NewTailBuffer(64 << 10)
	cmd := exec.Command(workerExecutable, args...)
	cmd.Stderr = stderr
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\nstderr: %s", err, stderr.String())
	}
	return cs, stderr
}

// bashOut runs the bash tool and returns its exit code and stdout.
func bashOut(t *testing.T, cs *sdk.ClientSession, command string) (int, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
	if err != nil || res.IsError {
		t.Fatalf("bash %q: %v %+v", command, err, res)
	}
	var out struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	data, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(data, &out)
	return out.ExitCode, out.Stdout
}

// TestMCPSession: with --session, bash runs in the task-environment
// container (state outside the workspace persists from call to call and is
// not on the host), the file tools on the host workspace that the container
// sees at the same path.
func TestMCPSession(t *testing.T) {
	testenv.RequireDocker(t)
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	code, out, errs := session(t, cfg, labels, "", "create", "-w", ws, "--task", "mcp")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { session(t, cfg, labels, "", "rm", id) })

	cs, stderr := mcpClient(t, "--config", cfg, "mcp", "--workspace", ws, "--session", id)
	defer cs.Close()
	marker := "/tmp/vak-mcp-session-" + strings.TrimPrefix(id, "mcp-")
	if c, _ := bashOut(t, cs, "echo installed > "+marker); c != 0 {
		t.Fatalf("first call failed: %s", stderr.String())
	}
	if c, got := bashOut(t, cs, "cat "+marker); c != 0 || got != "installed\n" {
		t.Fatalf("second call does not find the first call's file: %d %q", c, got)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("%s exists on the host: bash did not run in the session container", marker)
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "host.txt", "content": "from the host tool\n"}})
	if err != nil || res.IsError {
		t.Fatalf("write_file: %v %+v", err, res)
	}
	if c, got := bashOut(t, cs, "cat host.txt; hostname"); c != 0 || !strings.HasPrefix(got, "from the host tool\n") {
		t.Fatalf("the container does not see the host file tool's write: %d %q", c, got)
	}

	// A session of another workspace is refused at start.
	other := tempWorkspace(t)
	cmd := exec.Command(workerExecutable, "--config", cfg, "mcp", "--workspace", other, "--session", id)
	outb, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(outb), "belongs to workspace") {
		t.Fatalf("--session of another workspace: %v %s", err, outb)
	}
}

// TestMCPSessionNew: --session-new creates a session for the server and
// removes it when the client goes away.
func TestMCPSessionNew(t *testing.T) {
	testenv.RequireDocker(t)
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	args := append([]string{"--config", cfg, "mcp", "--workspace", ws, "--session-new"}, labels...)
	cs, stderr := mcpClient(t, args...)
	bashOut(t, cs, "echo x > /tmp/persist")
	if c, got := bashOut(t, cs, "cat /tmp/persist"); c != 0 || got != "x\n" {
		t.Fatalf("second call: %d %q", c, got)
	}
	if code, out, _ := session(t, cfg, labels, "", "ls"); code != 0 || !strings.Contains(out, "mcp-") {
		t.Fatalf("session ls while serving: %d %q", code, out)
	}
	cs.Close()
	if code, out, _ := session(t, cfg, labels, "", "ls"); code != 0 || strings.Contains(out, "mcp-") {
		t.Fatalf("the session outlived its server: %d %q\nstderr: %s", code, out, stderr.String())
	}
}

// TestMCPProjectConfig: `vak mcp` reads config as `vak run` does. The
// untrusted project config may narrow (read-only mode: the write tools are
// not listed; an extra protected path is refused) but its privileged keys
// are stripped (backend = "none" does not unsandbox bash).
func TestMCPProjectConfig(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	os.WriteFile(canary, []byte("CANARY"), 0o644)
	os.MkdirAll(filepath.Join(ws, ".vak"), 0o755)
	os.WriteFile(filepath.Join(ws, ".vak", "config.toml"), []byte("version = 1\n[sandbox]\nbackend = \"none\"\n[files]\nprotected = [\"deploy\"]\n"), 0o644)

	cs, stderr := mcpClient(t, "--config", cfg, "mcp", "--workspace", ws)
	if c, out := bashOut(t, cs, "cat "+canary); c == 0 || strings.Contains(out, "CANARY") {
		t.Fatalf("a project config's backend = \"none\" unsandboxed bash: %d %q", c, out)
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "deploy/x", "content": "x"}})
	if err != nil || !res.IsError {
		t.Fatalf("write to a project-protected path: %v %+v", err, res)
	}
	cs.Close()
	if !strings.Contains(stderr.String(), "sandbox.backend") {
		t.Errorf("no warning about the stripped key on stderr: %s", stderr.String())
	}

	os.WriteFile(filepath.Join(ws, ".vak", "config.toml"), []byte("version = 1\n[sandbox]\nmode = \"read-only\"\n"), 0o644)
	cs, _ = mcpClient(t, "--config", cfg, "mcp", "--workspace", ws)
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"bash", "glob", "grep", "read_file"}) {
		t.Fatalf("tools in a project narrowed to read-only: %v", names)
	}
}

// TestMCPDockerBackend: with the docker backend each bash call is a
// `docker run` of the configured image, as for `vak run`; a timed-out call
// leaves no container behind.
func TestMCPDockerBackend(t *testing.T) {
	cfg := dockerConfig(t)
	ws := tempWorkspace(t)
	cs, stderr := mcpClient(t, "--config", cfg, "mcp", "--workspace", ws)
	defer cs.Close()
	// Control: the host is Debian; the scratch test image is not.
	if _, err := os.Stat("/etc/debian_version"); err != nil {
		t.Skip("the in-image check needs a host with /etc/debian_version")
	}
	c, out := bashOut(t, cs, "test -x /bin/probe && test ! -e /etc/debian_version && echo in-image; id -u; touch f")
	if c != 0 || !strings.HasPrefix(out, "in-image\n"+strconv.Itoa(os.Getuid())+"\n") {
		t.Fatalf("bash under docker: %d %q\n%s", c, out, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(ws, "f")); err != nil {
		t.Fatalf("the container did not write the workspace: %v", err)
	}
	// The timeout leaves the container's start (seconds under a loaded
	// CI machine) time to run the command's first step.
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "touch started; sleep 120", "timeout": 10}})
	if err != nil || !res.IsError {
		t.Fatalf("timeout under docker: %v %+v", err, res)
	}
	if _, err := os.Stat(filepath.Join(ws, "started")); err != nil {
		t.Fatal("the command never started, so the timeout proves nothing")
	}
	if left := leftovers(t, ws); left != "" {
		t.Fatalf("containers left after a timed-out call: %s", left)
	}
}

// bearer adds the Authorization header.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPListen runs `vak mcp --listen` as a subprocess: it prints the URL
// and token once on stdout, serves a client that has the token, refuses one
// that does not, and exits cleanly on SIGTERM.
func TestMCPListen(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	cmd := exec.Command(workerExecutable, "--config", cfg, "mcp", "--workspace", ws, "--listen", "127.0.0.1:0")
	stderr := wire.NewTailBuffer(64 << 10)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	br := bufio.NewReader(stdout)
	var url, token string
	for url == "" || token == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the banner: %v\nstderr: %s", err, stderr.String())
		}
		if v, ok := strings.CutPrefix(line, "url: "); ok {
			url = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "authorization: Bearer "); ok {
			token = strings.TrimSpace(v)
		}
	}
	if strings.Contains(stderr.String(), token) {
		t.Fatal("the token appears in the log")
	}
	resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", resp.StatusCode)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	if c, out := bashOut(t, cs, "echo over-http"); c != 0 || out != "over-http\n" {
		t.Fatalf("bash over HTTP: %d %q", c, out)
	}
	cs.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
}

// TestMCPSandboxUnavailable: a sandbox that cannot start fails `vak mcp` at
// start (status 69, the reason on stderr), never a server whose every call
// fails or runs unsandboxed.
func TestMCPSandboxUnavailable(t *testing.T) {
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"vak-test:latest\"\n")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	code, out, errs := vakMain(t, cfg, "mcp", "--workspace", ws)
	if code != ExitUnavailable || out != "" || !strings.Contains(errs, "docker") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %d, nothing on stdout, the reason", code, out, errs, ExitUnavailable)
	}
}
