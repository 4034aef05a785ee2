package proxynet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/testenv"
)

// Environment knobs of TestConcurrentUseWithGC (defaults for CI; raise them
// by hand for a longer run).
const (
	envStressDuration   = "VAK_STRESS_DURATION"   // how long the workspaces keep working (Go duration; default 75s)
	envStressWorkspaces = "VAK_STRESS_WORKSPACES" // how many workspaces (default 3)
)

// stressOp is one kind of operation of the stress test.
type stressOp struct {
	name string
	// run performs it in workspace ws (task names a session) and returns
	// what failed ("" if nothing did).
	run func(ctx context.Context, ws, task string) string
}

// stressResult counts the operations of one kind.
type stressResult struct {
	ok       int
	failures []string
}

// One user's workspaces working at once through vak's own binary — proxied
// `vak run --backend docker` (the network removed after each run, and kept
// warm), native proxied runs, proxied sessions (create, exec, rm), a
// --docker session — two loops per workspace and one for the --docker
// session, while `vak gc` runs in a loop: no operation fails (every one
// exits 0 with its output), a successful command prints no warning, and
// once they stop and the warm time has passed, `vak gc` leaves nothing of
// this run (containers, networks, volumes with its test ID; session
// records; the on-demand gateway). How long and how many workspaces:
// VAK_STRESS_DURATION and VAK_STRESS_WORKSPACES.
func TestConcurrentUseWithGC(t *testing.T) {
	testenv.CheckLeftovers(t)
	testenv.RequireLandlock(t)
	needSidecarImage(t)
	dur, nws := stressKnobs(t)
	vak, img := testenv.Vak(t), testenv.Image(t)
	if os.Getuid() == 0 {
		// Built once (a debootstrap), outside the timed part.
		cli, err := engine.New()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dockerd.EnsureImage(context.Background(), cli, dockerd.DefaultRecipe, io.Discard); err != nil {
			t.Fatal(err)
		}
		cli.Close()
	}
	base, _ := filepath.EvalSymlinks(t.TempDir())
	xdg := filepath.Join(base, "state")
	os.MkdirAll(xdg, 0o700)
	config := func(name, idle string) string {
		f := filepath.Join(base, name+".toml")
		os.WriteFile(f, []byte(fmt.Sprintf(`version = 1
[sandbox]
image = %q
[[network.rules]]
name = "x"
action = "allow"
hosts = ["example.com"]
[session]
run_network_idle = %q
`, img, idle)), 0o600)
		return f
	}
	cold, warm := config("cold", "0"), config("warm", "2s")
	id := testenv.TestID(t)
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + id}
	env := append(os.Environ(), paths.EnvStateHome+"="+xdg)
	// vakCmd runs vak with cfg; a failure says the command, its exit and
	// its output.
	vakCmd := func(ctx context.Context, cfg string, args ...string) (string, string) {
		cmd := exec.CommandContext(ctx, vak, append([]string{"--config", cfg}, args...)...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		fail := ""
		if err != nil {
			fail = fmt.Sprintf("vak %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
		} else if strings.Contains(errb.String(), "warning") {
			fail = fmt.Sprintf("vak %s succeeded with a warning: %s", strings.Join(args, " "), strings.TrimSpace(errb.String()))
		}
		return out.String(), fail
	}
	t.Cleanup(func() {
		// Whatever a failure left: the gc of this run's labels, then every
		// object of this test that is still there (the test has failed
		// then; many leftover networks would use up the daemon's address
		// pools for every other test).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		vakCmd(ctx, cold, append([]string{"gc"}, labels...)...)
		for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
			out, _ := dockerOut(append(kind, "--filter", "label="+testenv.TestIDLabel+"="+id)...)
			if ids := strings.Fields(out); len(ids) > 0 {
				rm := map[string][]string{"ps": {"rm", "-f", "-v"}, "network": {"network", "rm"}, "volume": {"volume", "rm", "-f"}}[kind[0]]
				dockerOut(append(rm, ids...)...)
			}
		}
	})
	const probe = `test -n "$SSL_CERT_FILE" && echo ran`
	runOp := func(name, cfg, backend string) stressOp {
		return stressOp{name, func(ctx context.Context, ws, _ string) string {
			out, fail := vakCmd(ctx, cfg, append(append([]string{"run"}, labels...), "-w", ws, "--backend", backend, "--network", "proxied", "--", "sh", "-c", probe)...)
			if fail == "" && !strings.Contains(out, "ran") {
				fail = fmt.Sprintf("%s: output %q", name, out)
			}
			return fail
		}}
	}
	sessionOp := func(name string, extra ...string) stressOp {
		return stressOp{name, func(ctx context.Context, ws, task string) string {
			out, fail := vakCmd(ctx, cold, append(append(append([]string{"session", "create"}, labels...), "-w", ws, "--task", task, "--network", "proxied"), extra...)...)
			if fail != "" {
				return fail
			}
			sid := strings.TrimSpace(out)
			out, fail = vakCmd(ctx, cold, "session", "exec", sid, "--", "sh", "-c", probe)
			if fail == "" && !strings.Contains(out, "ran") {
				fail = fmt.Sprintf("%s: exec output %q", name, out)
			}
			if _, rmFail := vakCmd(ctx, cold, append(append([]string{"session", "rm"}, labels...), sid)...); fail == "" {
				fail = rmFail
			}
			return fail
		}}
	}
	runCold, runWarm := runOp("docker run (network removed after it)", cold, "docker"), runOp("docker run (network kept warm)", warm, "docker")
	native := runOp("native run", cold, "landlock")
	session, dockerSession := sessionOp("proxied session"), sessionOp("--docker session", "--docker")

	var wss []string
	for i := range nws {
		ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, "ws"+strconv.Itoa(i))))
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(ws, 0o777) // the sessions' user writes here
		wss = append(wss, ws)
	}
	// Each loop repeats its operations in its workspace until the deadline.
	type loop struct {
		ws  string
		ops []stressOp
	}
	var loops []loop
	for i, ws := range wss {
		loops = append(loops, loop{ws, rotate([]stressOp{runCold, native, runWarm}, i)}, loop{ws, rotate([]stressOp{session, runCold, runWarm}, i)})
	}
	loops = append(loops, loop{wss[0], []stressOp{dockerSession}})

	var (
		mu      sync.Mutex
		results = map[string]*stressResult{}
		wg      sync.WaitGroup
	)
	record := func(op, fail string) {
		mu.Lock()
		defer mu.Unlock()
		r := results[op]
		if r == nil {
			r = &stressResult{}
			results[op] = r
		}
		if fail == "" {
			r.ok++
		} else {
			r.failures = append(r.failures, fail)
		}
	}
	deadline := time.Now().Add(dur)
	for li, l := range loops {
		wg.Go(func() {
			for n := 0; time.Now().Before(deadline); n++ {
				op := l.ops[n%len(l.ops)]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				record(op.name, op.run(ctx, l.ws, fmt.Sprintf("s%d-%d", li, n)))
				cancel()
			}
		})
	}
	// vak gc in a loop meanwhile.
	stop := make(chan struct{})
	var gcDone sync.WaitGroup
	gcDone.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			_, fail := vakCmd(ctx, cold, append([]string{"gc"}, labels...)...)
			cancel()
			record("vak gc", fail)
		}
	})
	wg.Wait()
	close(stop)
	gcDone.Wait()

	total, failed := 0, 0
	for _, name := range slices.Sorted(maps.Keys(results)) {
		r := results[name]
		total += r.ok + len(r.failures)
		failed += len(r.failures)
		t.Logf("%-40s %4d ok, %d failed", name, r.ok, len(r.failures))
		for _, f := range r.failures {
			t.Errorf("%s failed: %s", name, f)
		}
	}
	t.Logf("%d workspaces for %v: %d operations, %d failed", nws, dur, total, failed)
	if results[runCold.name] == nil || results[session.name] == nil || results[dockerSession.name] == nil || results["vak gc"] == nil {
		t.Fatalf("an operation kind never ran (too short a VAK_STRESS_DURATION?): %v", slices.Sorted(maps.Keys(results)))
	}

	// Nothing is left once the warm time has passed and gc ran.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	left := func() []string {
		var out []string
		for _, kind := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
			o, err := dockerOut(append(kind, "-q", "--filter", "label="+testenv.TestIDLabel+"="+id)...)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range strings.Fields(o) {
				out = append(out, kind[0]+" "+f)
			}
		}
		recs, _ := filepath.Glob(filepath.Join(xdg, "vak", "sessions", "*.json"))
		return append(out, recs...)
	}
	for {
		_, fail := vakCmd(ctx, cold, append([]string{"gc"}, labels...)...)
		l := left()
		if fail == "" && len(l) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after the run, vak gc left %v (last gc: %s)", l, fail)
		}
		time.Sleep(time.Second) // the warm topologies' time to pass
	}
	if b, err := os.ReadFile(filepath.Join(xdg, "vak", "gateway-native", "gateway.pid")); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 && processAlive(pid) {
			t.Errorf("the on-demand gateway (pid %d) still runs after vak gc", pid)
		}
	}
}

// stressKnobs reads VAK_STRESS_DURATION and VAK_STRESS_WORKSPACES.
func stressKnobs(t *testing.T) (time.Duration, int) {
	dur, nws := 75*time.Second, 3
	if v := os.Getenv(envStressDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", envStressDuration, v)
		}
		dur = d
	}
	if v := os.Getenv(envStressWorkspaces); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", envStressWorkspaces, v)
		}
		nws = n
	}
	return dur, nws
}

// rotate returns ops starting at its i-th (mod len) element.
func rotate(ops []stressOp, i int) []stressOp {
	i %= len(ops)
	return append(slices.Clone(ops[i:]), ops[:i]...)
}

// processAlive reports whether pid exists (signal 0).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}
