package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"vak/internal/paths"
	"vak/internal/sandbox/docker"
	"vak/internal/testenv"
)

func TestMain(m *testing.M) {
	// Main re-executes its binary as the worker; in-process that would be
	// this test binary, so build the real one.
	os.Exit(testMainWithVak(m))
}

func testMainWithVak(m *testing.M) int {
	workerExecutable = testenv.Vak(tb{})
	// Runs keep a persistent home per workspace in the state dir by
	// default: keep the tests' homes out of the real one.
	if os.Getenv(paths.EnvStateHome) == "" {
		state, err := os.MkdirTemp("", "vak-cli-state-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(state)
		os.Setenv(paths.EnvStateHome, state)
	}
	return m.Run()
}

// tb lets testenv.Build run before any test exists.
type tb struct{ testing.TB }

func (tb) Helper()                        {}
func (tb) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }

// vakMain runs Main in-process with a private user config and returns the
// exit status, stdout and stderr.
func vakMain(t *testing.T, userConfig string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{}, args...)
	if userConfig != "" {
		full = append([]string{"--config", userConfig}, full...)
	}
	code := Main(context.Background(), full, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func tempWorkspace(t *testing.T) string {
	t.Helper()
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func dockerConfig(t *testing.T) string {
	return writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \""+testenv.Image(t)+"\"\n")
}

// leftovers lists containers vak created for workspace ws.
func leftovers(t *testing.T, ws string) string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=vak.workspace="+ws).CombinedOutput()
	if err != nil {
		t.Fatalf("docker ps: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestRunDockerIDAndTouch(t *testing.T) {
	cfg := dockerConfig(t)
	ws := tempWorkspace(t)
	code, out, errs := vakMain(t, cfg, "run", "--workspace", ws, "--", "sh", "-c", `id -u; touch f; echo "quote's $HOME"`)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	if !strings.Contains(out, "quote's "+docker.PersistentHome) || !strings.HasPrefix(out, strconv.Itoa(os.Getuid())) {
		t.Fatalf("output %q", out)
	}
	fi, err := os.Stat(filepath.Join(ws, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
		t.Fatalf("f owned by %d:%d, want the caller %d:%d", st.Uid, st.Gid, os.Getuid(), os.Getgid())
	}
	if code, _, _ := vakMain(t, cfg, "run", "-w", ws, "--", "sh", "-c", "exit 3"); code != 3 {
		t.Fatalf("exit status %d, want 3", code)
	}
	if l := leftovers(t, ws); l != "" {
		t.Fatalf("containers left: %s", l)
	}
}

// Fail closed: with the daemon unreachable the command fails with a clear
// message and status 69, and nothing runs on the host.
func TestRunFailsClosedWithoutDaemon(t *testing.T) {
	testenv.RequireDocker(t) // the test image name must resolve from config
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\n")
	ws := tempWorkspace(t)
	marker := filepath.Join(t.TempDir(), "ran-on-host")
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--", "touch", marker)
	if code != ExitUnavailable {
		t.Fatalf("exit %d, want %d: %s %s", code, ExitUnavailable, out, errs)
	}
	if !strings.Contains(errs, "docker daemon unavailable") || !strings.Contains(errs, "nothing was run") {
		t.Fatalf("unclear message: %s", errs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran on the host")
	}
	// The marker path is writable, so the check above is meaningful.
	if code, _, errs := vakMain(t, cfg, "run", "-w", ws, "--mode", "full-access", "--", "touch", marker); code != 0 {
		t.Fatalf("full-access control: %d %s", code, errs)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("control run did not create the marker")
	}
}

func TestRunTimeoutKillsContainer(t *testing.T) {
	cfg := dockerConfig(t)
	ws := tempWorkspace(t)
	// The timeout must outlast the container's start, which takes longer
	// on a loaded machine: a run whose command never started proves
	// nothing, so it is repeated with a longer timeout.
	var start time.Time
	for _, timeout := range []string{"3s", "15s", "60s"} {
		start = time.Now()
		code, _, errs := vakMain(t, cfg, "run", "-w", ws, "--timeout", timeout, "--", "sh", "-c", "touch started; sleep 120")
		if code != ExitTimeout {
			t.Fatalf("exit %d, want %d: %s", code, ExitTimeout, errs)
		}
		if !strings.Contains(errs, "timed out after "+timeout) {
			t.Fatalf("message: %s", errs)
		}
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		t.Logf("the command had not started when --timeout %s ran out: again with a longer one", timeout)
	}
	if _, err := os.Stat(filepath.Join(ws, "started")); err != nil {
		t.Fatal("command never started, so the timeout test proves nothing")
	}
	if l := leftovers(t, ws); l != "" {
		t.Fatalf("container survived the timeout: %s", l)
	}
	t.Logf("timed out and cleaned up in %v", time.Since(start))
}

func TestRunInterruptKillsContainer(t *testing.T) {
	cfg := dockerConfig(t)
	ws := tempWorkspace(t)
	cmd := exec.Command(testenv.Vak(t), "--config", cfg, "run", "-w", ws, "--", "sh", "-c", "touch started; sleep 120")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("container never started: %s", errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := leftovers(t, ws); l == "" {
		t.Fatal("no running container found, so the interrupt test proves nothing")
	}
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if cmd.ProcessState.ExitCode() != ExitInterrupted {
		t.Fatalf("exit %v, want %d: %s", err, ExitInterrupted, errb.String())
	}
	if l := leftovers(t, ws); l != "" {
		t.Fatalf("container survived Ctrl-C: %s", l)
	}
}

func TestRunConfigErrors(t *testing.T) {
	ws := tempWorkspace(t)
	bad := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\nimgae = \"x\"\n")
	code, _, errs := vakMain(t, bad, "run", "-w", ws, "--", "true")
	if code != ExitConfig || !strings.Contains(errs, bad+":4:") || !strings.Contains(errs, "sandbox.imgae: unknown key; did you mean image?") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// A config named with --config must be a readable file: absent, a
	// directory or unreadable, nothing runs (78, naming it), for run and
	// for doctor. Control: the file once written runs the command.
	dir := t.TempDir()
	named := filepath.Join(dir, "named.toml")
	unreadable := filepath.Join(dir, "unreadable.toml")
	os.WriteFile(unreadable, []byte("version = 1\n"), 0)
	for _, tc := range []struct{ file, want string }{
		{named, "does not exist"},
		{dir, "not a regular file"},
		{unreadable, "permission denied"},
	} {
		if tc.file == unreadable && os.Getuid() == 0 {
			continue // root reads it; the non-root leg runs this case
		}
		for _, args := range [][]string{{"run", "-w", ws, "--", "touch", "ran"}, {"doctor", "-w", ws}} {
			code, out, errs := vakMain(t, tc.file, args...)
			if code != ExitConfig || !strings.Contains(errs, tc.file+": ") || !strings.Contains(errs, tc.want) || out != "" {
				t.Errorf("--config %s %s: exit %d (want %d), stdout %q, stderr %q (want %q)", tc.file, args[0], code, ExitConfig, out, errs, tc.want)
			}
		}
		if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
			t.Fatalf("--config %s: the command ran", tc.file)
		}
	}
	os.WriteFile(named, []byte("version = 1\n[sandbox]\nbackend = \"none\"\nmode = \"full-access\"\n"), 0o600)
	if code, _, errs := vakMain(t, named, "run", "-w", ws, "--", "touch", "ran"); code != 0 {
		t.Fatalf("control: --config %s once written: exit %d: %s", named, code, errs)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err != nil {
		t.Fatalf("control: the command did not run: %v", err)
	}
	os.Remove(filepath.Join(ws, "ran"))
	// An invalid project config fails closed too.
	os.MkdirAll(filepath.Join(ws, ".vak"), 0o755)
	os.WriteFile(filepath.Join(ws, ".vak", "config.toml"), []byte("version = 1\n[sandbox\n"), 0o644)
	good := writeConfig(t, "version = 1\n")
	if code, _, errs := vakMain(t, good, "run", "-w", ws, "--mode", "full-access", "--", "true"); code != ExitConfig || !strings.Contains(errs, ".vak/config.toml:2") {
		t.Fatalf("project config error: exit %d: %s", code, errs)
	}
}

func TestRunUsageErrors(t *testing.T) {
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	for _, args := range [][]string{
		{"run", "-w", ws},
		{"run", "-w", ws, "--mode", "rw", "--", "true"},
		{"run", "-w", ws, "--backend", "chroot", "--", "true"},
		{"run", "-w", "/", "--", "true"},
		{"run", "-w", ws, "--nope", "--", "true"},
		{"run", "-w", ws, "--", "echo", "a\x00b"},
	} {
		if code, _, errs := vakMain(t, cfg, args...); code != ExitUsage || errs == "" {
			t.Errorf("%q: exit %d: %s", args, code, errs)
		}
	}
	// none is never a silent weakening.
	if code, _, errs := vakMain(t, cfg, "run", "-w", ws, "--backend", "none", "--", "true"); code != ExitUnavailable || !strings.Contains(errs, "only valid with mode full-access") {
		t.Errorf("backend none in workspace-write: exit %d: %s", code, errs)
	}
}

func TestDoctor(t *testing.T) {
	testenv.RequireDocker(t)
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\n")
	os.MkdirAll(filepath.Join(ws, ".vak"), 0o755)
	os.WriteFile(filepath.Join(ws, ".vak", "config.toml"), []byte("version = 1\n[sandbox]\nimage = \"evil\"\nmode = \"read-only\"\n"), 0o644)
	code, out, errs := vakMain(t, cfg, "doctor", "-w", ws)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	for _, want := range []string{
		cfg + " (trusted): loaded",
		filepath.Join(ws, ".vak", "config.toml") + " (untrusted): loaded",
		"ignoring sandbox.image",
		"effective backend: docker (requested docker",
		"mode: read-only",
		"docker    command  available (server ",
		"limits: memory 2048 MiB in total (the container's cgroup: docker run --memory)",
		"limits: cpus 2 (the container's CPU quota: docker run --cpus)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	if code, out, _ := vakMain(t, cfg, "doctor", "-w", ws); code != ExitUnavailable || !strings.Contains(out, "cannot run") {
		t.Fatalf("doctor with dead daemon: exit %d:\n%s", code, out)
	}
}

// The README's first command: the embedded default (landlock on Linux).
func TestRunDefaultBackend(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--", "sh", "-c", "echo hello from the sandbox; touch made-by-sandbox; cat ~/.ssh/id_ed25519 2>&1; exit 4")
	if code != 4 || !strings.Contains(out, "hello from the sandbox") {
		t.Fatalf("exit %d: %q %q", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(ws, "made-by-sandbox")); err != nil {
		t.Fatal("workspace write not visible")
	}
	code, out, _ = vakMain(t, cfg, "doctor", "-w", ws)
	if code != 0 || !strings.Contains(out, "effective backend: landlock") || !strings.Contains(out, "landlock abi ") || !strings.Contains(out, "tripwire: the checks around a command look only at what changed: a landlock session's workspace watcher") {
		t.Fatalf("doctor: %d\n%s", code, out)
	}
	// Timeout through the native backend.
	code, _, errs = vakMain(t, cfg, "run", "-w", ws, "--timeout", "1s", "--", "sh", "-c", "sleep 100 & sleep 100")
	if code != ExitTimeout {
		t.Fatalf("timeout: exit %d %s", code, errs)
	}
	// A protected path the command creates is removed and reported.
	code, _, errs = vakMain(t, cfg, "run", "-w", ws, "--", "sh", "-c", "mkdir .vak && echo 'version = 1' > .vak/config.toml")
	if code != 0 || !strings.Contains(errs, "protected path .vak") {
		t.Fatalf("tripwire: exit %d %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(ws, ".vak")); err == nil {
		t.Fatal(".vak survived")
	}
}

// A SIGKILLed `vak run` (landlock) leaves no command running: the sandbox's
// init dies with its parent and takes every process of the sandbox along.
// The private temp dir it could not remove is what `vak gc` cleans up.
func TestRunKilledLeavesNothing(t *testing.T) {
	testenv.RequireLandlock(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the killed run's temp dir lands here, and gc looks here
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	// A unique argument marks the command among all processes of the host.
	marker := fmt.Sprintf("300.%d", time.Now().UnixNano()%1_000_000_000)
	cmd := exec.Command(workerExecutable, "--config", cfg, "run", "-w", ws, "--", "sleep", marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(t, "the sandboxed sleep to start", func() bool { return len(sleepers(marker)) > 0 })
	pids := sleepers(marker)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitFor(t, fmt.Sprintf("the sandboxed sleep %v to die with its vak process", pids), func() bool { return len(sleepers(marker)) == 0 })

	// The killed run's temp dir is still there (control), and gc removes it.
	stale, _ := filepath.Glob(filepath.Join(tmp, "vak-tmp-"+strconv.Itoa(cmd.Process.Pid)+"-*"))
	if len(stale) != 1 {
		t.Fatalf("control: the killed run left no temp dir in %s (%v)", tmp, stale)
	}
	code, out, errs := vakMain(t, cfg, "gc")
	t.Logf("killed vak %d with sandboxed sleep %v; vak gc: exit %d %q %q", cmd.Process.Pid, pids, code, out, errs)
	if _, err := os.Stat(stale[0]); err == nil {
		t.Fatalf("vak gc kept %s: %q %q", stale[0], out, errs)
	}
	if !strings.Contains(out, stale[0]) {
		t.Errorf("vak gc did not report removing %s: %q", stale[0], out)
	}
}

// sleepers returns the pids of processes whose argv is exactly sleep MARKER.
func sleepers(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if a := strings.Split(strings.TrimRight(string(argv), "\x00"), "\x00"); len(a) == 2 && filepath.Base(a[0]) == "sleep" && a[1] == marker {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitFor polls cond until it holds, failing the test after a generous bound
// (a hang, not a slow machine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// doctor reports the roots a proxied topology's gateway trusts upstream:
// the compiled-in set and the host bundle ($SSL_CERT_FILE here).
func TestDoctorUpstreamRoots(t *testing.T) {
	testenv.RequireDocker(t)
	ws := tempWorkspace(t)
	bundle := testenv.GenCerts(t, "x.test").CA
	t.Setenv("SSL_CERT_FILE", bundle)
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nhosts = [\"a.test\"]\n[gateway]\nextra_ca_bundles = [\""+bundle+"\"]\n")
	code, out, errs := vakMain(t, cfg, "doctor", "-w", ws)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	want := regexp.MustCompile(`gateway upstream roots: [1-9][0-9]+ compiled into vak, 1 from the host bundle ` + regexp.QuoteMeta(bundle) + ` \(copied at topology creation\), extra_ca_bundles ` + regexp.QuoteMeta(bundle))
	if !want.MatchString(out) {
		t.Fatalf("doctor does not report the upstream roots:\n%s", out)
	}
}

// TestRunDockerLabels: the hidden --label reaches the containers a docker
// run creates (tests rely on it to find and sweep what they leave).
func TestRunDockerLabels(t *testing.T) {
	cfg := dockerConfig(t)
	ws := tempWorkspace(t)
	lbl := "vak.test.run=" + testenv.UniqueName("lbl")
	done := make(chan int, 1)
	go func() {
		code, _, _ := vakMain(t, cfg, "run", "--label", lbl, "-w", ws, "--", "sh", "-c", "while [ ! -e go ]; do sleep 0.1; done")
		done <- code
	}()
	labelled := func() string {
		out, err := exec.Command("docker", "ps", "-q", "--filter", "label="+lbl).CombinedOutput()
		if err != nil {
			t.Fatalf("docker ps: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for labelled() == "" {
		if time.Now().After(deadline) {
			os.WriteFile(filepath.Join(ws, "go"), nil, 0o644)
			<-done
			t.Fatalf("no running container carries %s", lbl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	if left := leftovers(t, ws); left != "" {
		t.Errorf("containers left: %s", left)
	}
}
