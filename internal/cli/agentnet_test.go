package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/agenthome"
	"vak/internal/agentnet"
	"vak/internal/engine"
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

// TestAgentnetRunRegisters: `vak run` in a workspace with an enabled
// policy (its --config given relative to the current directory) starts
// the broker on demand and registers a task for as long as
// it runs: a peer's message crosses the edge while the command runs, the
// edge is down and sends are refused once it exited, and the receipts
// carry the registration and its revocation at exit. No token reaches the
// sandbox: the command dumps the environment and command line of every
// process it can see, and no token (prefix vakan1.) is in its output.
func TestAgentnetRunRegisters(t *testing.T) {
	testenv.RequireLandlock(t)
	state, err := os.MkdirTemp("", "vsr")
	if err != nil {
		t.Fatal(err)
	}
	dir := agentnet.Dir(filepath.Join(state, "vak"))
	t.Cleanup(func() {
		stopBrokerByPID(t, dir)
		os.RemoveAll(state)
	})
	t.Setenv("XDG_STATE_HOME", state)
	wa, wb := tempWorkspace(t), tempWorkspace(t)
	cfg := writeConfig(t, fmt.Sprintf("version = 1\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n", wa, wb, wb, wa))
	c := agentnet.NewClient(dir)
	defer c.Close()
	if c.Ping(context.Background()) == nil {
		t.Fatal("control: a broker answers before vak run started one")
	}
	script := `for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; echo; done | tr '\0' '\n'; env; echo DUMPED; while [ ! -e go ]; do sleep 0.02; done; echo FINISHED`
	type result struct {
		code     int
		out, err string
	}
	// A relative --config: the broker started on demand (in its state
	// dir) still reads the same file.
	t.Chdir(filepath.Dir(cfg))
	relCfg := filepath.Base(cfg)
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"--config", relCfg, "run", "-w", wa, "--backend", "landlock", "--", "sh", "-c", script}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		done <- result{code, out.String(), errb.String()}
	}()
	ctx := context.Background()
	waitUntil(t, "vak run started a broker", func() bool { return c.Ping(ctx) == nil })
	tb, _, err := c.Register(ctx, wb)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the edge is up (vak run registered its workspace)", func() bool {
		es, err := c.Edges(ctx)
		return err == nil && len(es) == 1 && es[0].Up
	})
	if _, err := c.Send(ctx, tb, wa, "t", []byte("to the run")); err != nil {
		t.Fatalf("send to the running workspace: %v", err)
	}
	if err := os.WriteFile(filepath.Join(wa, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "DUMPED") || !strings.Contains(r.out, "FINISHED") {
		t.Fatalf("vak run: %d %q %q", r.code, r.out, r.err)
	}
	if !strings.Contains(r.out, "PATH=") {
		t.Fatalf("control: the sandbox's environment was not dumped: %q", r.out)
	}
	if strings.Contains(r.out, "vakan1.") || strings.Contains(r.err, "vakan1.") {
		t.Fatalf("a task token reached the sandbox or vak's output:\n%s\n%s", r.out, r.err)
	}
	es, err := c.Edges(ctx)
	if err != nil || len(es) != 1 || es[0].Up || !strings.Contains(es[0].Reason, "no live registration") {
		t.Fatalf("edges after the run: %+v %v", es, err)
	}
	if _, err := c.Send(ctx, tb, wa, "t", []byte("too late")); !errors.Is(err, agentnet.ErrNoEdge) {
		t.Fatalf("send after the run ended: %v", err)
	}
	// The broker signs its log in batches: stop it (it signs the rest) and
	// verify.
	stopBrokerByPID(t, dir)
	if code, out, errs := vakMain(t, "", "receipts", "verify", "--key", filepath.Join(agentnet.ReceiptsKeyDir(dir), receipts.PubKeyFile), agentnet.ReceiptsFile(dir)); code != 0 {
		t.Fatalf("receipts verify: %d %s %s", code, out, errs)
	}
	data, _ := os.ReadFile(agentnet.ReceiptsFile(dir))
	var reg, unreg bool
	for _, line := range strings.Split(string(data), "\n") {
		reg = reg || strings.Contains(line, `"method":"register"`) && strings.Contains(line, wa)
		unreg = unreg || strings.Contains(line, `"method":"revoke"`) && strings.Contains(line, "unregistered")
	}
	if !reg || !unreg {
		t.Fatalf("receipts lack the run's registration (%v) or its end (%v):\n%s", reg, unreg, data)
	}
}

// TestAgentnetSocketUnreachableFromDocker: under the docker backend, a
// command of a workspace registered on the agent network (its `vak run`
// holds a live task, the broker runs) cannot reach the broker: its socket
// is not mounted, so connecting to its host path, or to that path through
// /proc/1/root, fails, no unix socket of the host is anywhere in the
// container's file system, and the container has no network (the Engine
// API shows NetworkMode "none"; only lo exists inside). Controls: the test
// process connects to the broker socket, and the command connects to a
// unix socket the test listens on in the mounted workspace (so the probe
// and unix connects work in the container).
func TestAgentnetSocketUnreachableFromDocker(t *testing.T) {
	img := testenv.Image(t)
	state, err := os.MkdirTemp("", "vsd")
	if err != nil {
		t.Fatal(err)
	}
	dir := agentnet.Dir(filepath.Join(state, "vak"))
	t.Cleanup(func() {
		stopBrokerByPID(t, dir)
		os.RemoveAll(state)
	})
	t.Setenv("XDG_STATE_HOME", state)
	ws, peer := tempWorkspace(t), tempWorkspace(t)
	cfg := writeConfig(t, fmt.Sprintf("version = 1\n[sandbox]\nbackend = \"docker\"\nimage = %q\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n", img, ws, peer, peer, ws))
	t.Cleanup(func() {
		if ids := strings.Fields(leftovers(t, ws)); len(ids) > 0 {
			exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
			t.Errorf("left containers behind: %v", ids)
		}
	})
	// The control socket in the workspace (mounted into the container).
	ctl := filepath.Join(ws, "ctl.sock")
	l, err := net.Listen("unix", ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	sock := filepath.Join(dir, agentnet.SocketName)
	script := fmt.Sprintf(`probe unix %[1]s; probe unix /proc/1/root%[1]s; probe unix %[2]s; echo SOCKETS; find / \( -path /proc -o -path /sys \) -prune -o -type s -print 2>/dev/null; echo NETDEVS; ls /sys/class/net; echo PROBED; touch probed; while [ ! -e go ]; do sleep 0.05; done`, sock, ctl)
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"--config", cfg, "run", "--label", "vak.test=1", "-w", ws, "--", "sh", "-c", script}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
		done <- result{code, out.String(), errb.String()}
	}()
	ctx := context.Background()
	c := agentnet.NewClient(dir)
	defer c.Close()
	// The run registered its workspace (the broker it started answers:
	// the positive control for the socket).
	waitUntil(t, "vak run registered the workspace with a broker", func() bool {
		es, err := c.Edges(ctx)
		return err == nil && len(es) == 1 && strings.Contains(es[0].Reason, peer+" has no live registration")
	})
	eng, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var id string
	waitUntil(t, "the command's container runs", func() bool {
		select {
		case r := <-done:
			t.Fatalf("vak run ended early: %d %q %q", r.code, r.out, r.err)
		default:
		}
		cs, err := eng.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", "vak.workspace="+ws)})
		if err != nil || len(cs.Items) != 1 {
			return false
		}
		id = cs.Items[0].ID
		return true
	})
	ins, err := eng.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nm := ins.Container.HostConfig.NetworkMode; nm != "none" {
		t.Errorf("the task container runs with network mode %q, want none", nm)
	}
	// The agent's persistent home (--home, default workspace) lives in the
	// state dir too: that one directory is the only thing of it mounted.
	homes, err := agenthome.Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ins.Container.Mounts {
		if strings.HasPrefix(m.Source, homes+"/") && !strings.HasPrefix(sock, m.Source+"/") {
			continue
		}
		if strings.HasPrefix(m.Source, state) || strings.HasPrefix(sock, m.Source+"/") || strings.Contains(m.Source, "docker.sock") {
			t.Errorf("the task container mounts %s (at %s): the broker's state or a docker socket", m.Source, m.Destination)
		}
	}
	waitUntil(t, "the command probed", func() bool { _, err := os.Stat(filepath.Join(ws, "probed")); return err == nil })
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	t.Logf("the command printed:\n%s", r.out)
	if r.code != 0 || !strings.Contains(r.out, "PROBED") {
		t.Fatalf("vak run: %d %q %q", r.code, r.out, r.err)
	}
	if !strings.Contains(r.out, "OK connected "+ctl) {
		t.Fatalf("control: the command could not connect to the workspace's socket: %s", r.out)
	}
	if strings.Contains(r.out, "OK connected "+sock) || strings.Contains(r.out, "OK connected /proc/1/root") {
		t.Fatalf("the container reached the broker socket: %s", r.out)
	}
	sockets, _, _ := strings.Cut(r.out[strings.Index(r.out, "SOCKETS"):], "NETDEVS")
	for _, l := range strings.Fields(sockets)[1:] {
		if l != ctl {
			t.Errorf("a unix socket other than the workspace's control is in the container: %s", l)
		}
	}
	netdevs, _, _ := strings.Cut(r.out[strings.Index(r.out, "NETDEVS"):], "PROBED")
	if devs := strings.Fields(netdevs)[1:]; len(devs) != 1 || devs[0] != "lo" {
		t.Errorf("network devices in the task container: %v, want [lo]", devs)
	}
	if strings.Contains(r.out, "vakan1.") {
		t.Fatal("a token reached the container")
	}
}
