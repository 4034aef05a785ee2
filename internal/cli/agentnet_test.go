package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vak/internal/agentnet"
	"vak/internal/receipts"
	"vak/internal/testenv"
)

// TestAgentnetServeEdgesReloadRevoke runs the real broker command on its
// socket, registers two workspaces through the client, and drives edges,
// reload and revoke through vak's own commands; the receipts verify after.
func TestAgentnetServeEdgesReloadRevoke(t *testing.T) {
	state, err := os.MkdirTemp("", "vst") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	t.Setenv("XDG_STATE_HOME", state)
	wa, wb := tempWorkspace(t), tempWorkspace(t)
	mutual := fmt.Sprintf("version = 1\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n", wa, wb, wb, wa)
	cfg := writeConfig(t, mutual)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var serveErr bytes.Buffer
	go func() {
		done <- Main(ctx, []string{"--config", cfg, "agentnet", "serve"}, Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &serveErr})
	}()
	dir := agentnet.Dir(filepath.Join(state, "vak"))
	c := agentnet.NewClient(dir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Edges(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("broker did not come up: %s", serveErr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ta, _, err := c.Register(ctx, wa)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Register(ctx, wb); err != nil {
		t.Fatal(err)
	}
	code, out, errs := vakMain(t, cfg, "agentnet", "edges")
	if code != 0 || !strings.Contains(out, " up ") {
		t.Fatalf("edges: %d %q %q", code, out, errs)
	}
	// B stops naming A: after a reload the edge is down, with the reason.
	os.WriteFile(cfg, []byte(fmt.Sprintf("version = 1\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n[[agent_network.workspace]]\npath = %q\n", wa, wb, wb)), 0o644)
	if code, _, errs := vakMain(t, cfg, "agentnet", "reload"); code != 0 {
		t.Fatalf("reload: %d %s", code, errs)
	}
	code, out, _ = vakMain(t, cfg, "agentnet", "edges")
	if code != 0 || !strings.Contains(out, "down") || !strings.Contains(out, "does not list") {
		t.Fatalf("edges after reload: %q", out)
	}
	if _, err := c.Send(ctx, ta, wb, "t", []byte("x")); !errors.Is(err, agentnet.ErrNoEdge) {
		t.Fatalf("send across a dropped edge: %v", err)
	}
	code, out, errs = vakMain(t, cfg, "agentnet", "revoke", wa)
	if code != 0 || !strings.Contains(out, "revoked 1 task") {
		t.Fatalf("revoke: %d %q %q", code, out, errs)
	}
	if _, err := c.Peers(ctx, ta); !errors.Is(err, agentnet.ErrToken) {
		t.Fatalf("token after revoke: %v", err)
	}
	if code, _, errs := vakMain(t, cfg, "agentnet", "revoke", "/nonexistent-ws"); code != ExitUsage {
		t.Fatalf("revoke of an unknown workspace: %d %s", code, errs)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d: %s", code, serveErr.String())
	}
	log := agentnet.ReceiptsFile(dir)
	code, out, errs = vakMain(t, "", "receipts", "verify", "--key", filepath.Join(agentnet.ReceiptsKeyDir(dir), receipts.PubKeyFile), log)
	if code != 0 {
		t.Fatalf("receipts verify: %d %q %q", code, out, errs)
	}
	data, _ := os.ReadFile(log)
	for _, want := range []string{`"method":"register"`, `"method":"edge-up"`, `"method":"edge-down"`, `"method":"message","host":`, `"method":"revoke"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("receipts lack %s", want)
		}
	}
	_, sig, _ := strings.Cut(ta, ".")
	if strings.Contains(string(data), sig) {
		t.Fatal("receipts contain a token")
	}
}

// TestAgentnetSocketUnreachableFromSandbox: a command run through `vak run`
// (native sandbox) cannot connect to the broker socket; the same connect
// from outside the sandbox gets an answer (positive control).
func TestAgentnetSocketUnreachableFromSandbox(t *testing.T) {
	testenv.RequireLandlock(t)
	// A system python (a shim under $HOME is hidden by the sandbox itself).
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("/usr/bin/python3 is needed to open a unix socket")
	}
	state, err := os.MkdirTemp("", "vsx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	t.Setenv("XDG_STATE_HOME", state)
	cfg := writeConfig(t, "version = 1\n")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--config", cfg, "agentnet", "serve"}, Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	sock := filepath.Join(agentnet.Dir(filepath.Join(state, "vak")), agentnet.SocketName)
	c := &agentnet.Client{Socket: sock}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Edges(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("broker did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
	probe := `import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); s.sendall(b'{"op":"edges"}\n'); print("REACHED", s.recv(100))
except OSError as e:
    print("REFUSED", e)
`
	out, err := exec.Command(py, "-c", probe, sock).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "REACHED") {
		t.Fatalf("control: the socket is not reachable outside the sandbox: %v %s", err, out)
	}
	ws := tempWorkspace(t)
	for _, mode := range []string{"read-only", "workspace-write"} {
		code, sout, serr := vakMain(t, cfg, "run", "-w", ws, "--backend", "landlock", "--mode", mode, "--", py, "-c", probe, sock)
		if strings.Contains(sout, "REACHED") || !strings.Contains(sout, "REFUSED") {
			t.Fatalf("%s: the sandbox reached the broker socket (exit %d): %s %s", mode, code, sout, serr)
		}
	}
}
