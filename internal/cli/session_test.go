package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
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

	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/hostenv"
	"vak/internal/taskenv"
	"vak/internal/testenv"
)

// sessionEnv isolates vak's state directory and returns the labels every
// session command of the test passes (so the test's objects can be found
// and removed, and gc only looks at them).
func sessionEnv(t *testing.T) (cfg string, labels []string) {
	t.Helper()
	img := testenv.Image(t)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	run := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-" + strconv.FormatInt(time.Now().UnixNano()%100000, 10)
	labels = []string{"--label", "vak.test=1", "--label", "vak.test.pkg=cli", "--label", "vak.test.run=" + run}
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=vak.test.run="+run).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			exec.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).Run()
			t.Errorf("test left containers behind: %v", ids)
		}
		out, _ = exec.Command("docker", "images", "-q", "--filter", "label=vak.test.run="+run).Output()
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			exec.Command("docker", append([]string{"rmi", "-f"}, ids...)...).Run()
		}
	})
	return writeConfig(t, "version = 1\n[sandbox]\nimage = \""+img+"\"\n"), labels
}

// session runs `vak session SUB LABELS... ARGS...` in-process.
func session(t *testing.T, cfg string, labels []string, stdin string, sub string, args ...string) (int, string, string) {
	t.Helper()
	full := append([]string{"--config", cfg, "session", sub}, labels...)
	full = append(full, args...)
	var out, errb bytes.Buffer
	code := Main(context.Background(), full, Stdio{In: strings.NewReader(stdin), Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

func TestSessionCLI(t *testing.T) {
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	code, out, errs := session(t, cfg, labels, "", "create", "-w", ws, "--task", "cli")
	if code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	id := strings.TrimSpace(out)
	if id != taskenv.SessionID("cli", ws) {
		t.Fatalf("create printed %q", out)
	}
	exec1 := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		return session(t, cfg, labels, stdin, "exec", args...)
	}
	// Status, output, files in the workspace.
	if code, out, errs := exec1("", id, "--", "sh", "-c", "echo $((6*7)) > answer; echo out; echo err >&2; exit 3"); code != 3 || out != "out\n" || errs != "err\n" {
		t.Fatalf("exec: %d %q %q", code, out, errs)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "answer")); string(data) != "42\n" {
		t.Fatalf("workspace file %q", data)
	}
	// argv reaches the container as argv.
	if code, out, _ := exec1("", id, "--", "printf", "%s|", "a b", "it's", "$HOME", ";true"); code != 0 || out != "a b|it's|$HOME|;true|" {
		t.Fatalf("argv: %d %q", code, out)
	}
	// Working directory, environment, stdin, timeout.
	if code, _, errs := exec1("", "--cwd", "/etc", id, "--", "true"); code != ExitUsage || !strings.Contains(errs, "outside") {
		t.Fatalf("cwd outside: %d %s", code, errs)
	}
	if code, out, _ := exec1("", "-e", "FOO=bar", id, "--", "sh", "-c", "echo $FOO"); code != 0 || out != "bar\n" {
		t.Fatalf("env: %d %q", code, out)
	}
	if code, _, errs := exec1("", "-e", "AWS_SECRET_ACCESS_KEY", id, "--", "true"); code != ExitUsage || !strings.Contains(errs, "not allowed") {
		t.Fatalf("copying a host variable: %d %s", code, errs)
	}
	if code, out, _ := exec1("from stdin", "-i", id, "--", "cat"); code != 0 || out != "from stdin" {
		t.Fatalf("stdin: %d %q", code, out)
	}
	if code, _, errs := exec1("", "--timeout", "1s", id, "--", "sleep", "60"); code != ExitTimeout || !strings.Contains(errs, "timed out") {
		t.Fatalf("timeout: %d %s", code, errs)
	}
	if code, _, errs := exec1("", "--root", id, "--", "true"); code != ExitUsage || !strings.Contains(errs, "allow_install") {
		t.Fatalf("root without allow_install: %d %s", code, errs)
	}
	if code, _, errs := exec1("", "nope-0123456789", "--", "true"); code != ExitUsage || !strings.Contains(errs, "no such session") {
		t.Fatalf("unknown session: %d %s", code, errs)
	}
	// Snapshot: key and image; the same again is a cache hit.
	exec1("", id, "--", "sh", "-c", "echo pkg > $HOME/pkg")
	code, out, errs = session(t, cfg, labels, "", "snapshot", id, "-m", "step=pkg")
	if code != 0 || !strings.Contains(out, "key:") || !strings.Contains(out, "image: vak-env:") {
		t.Fatalf("snapshot: %d %q %s", code, out, errs)
	}
	code, key, _ := session(t, cfg, labels, "", "snapshot", "-q", id, "-m", "step=pkg")
	key = strings.TrimSpace(key)
	if code != 0 || !strings.Contains(out, key) {
		t.Fatalf("snapshot -q: %d %q (first: %q)", code, key, out)
	}
	if _, out, _ := session(t, cfg, labels, "", "snapshot", id, "-m", "step=pkg"); !strings.Contains(out, "cached") {
		t.Fatalf("no cache hit: %q", out)
	}
	code, out, errs = session(t, cfg, labels, "", "create", "-w", ws, "--task", "from", "--from", key)
	if code != 0 {
		t.Fatalf("create --from: %d %s", code, errs)
	}
	id2 := strings.TrimSpace(out)
	if code, out, _ := exec1("", id2, "--", "cat", taskenv.SessionHome+"/pkg"); code != 0 || out != "pkg\n" {
		t.Fatalf("from snapshot: %d %q", code, out)
	}
	// ls, rm.
	code, out, _ = session(t, cfg, labels, "", "ls", "-q")
	if code != 0 || !strings.Contains(out, id+"\n") || !strings.Contains(out, id2+"\n") {
		t.Fatalf("ls: %d %q", code, out)
	}
	if code, _, errs := session(t, cfg, labels, "", "rm", id, id2); code != 0 {
		t.Fatalf("rm: %d %s", code, errs)
	}
	if code, out, _ := session(t, cfg, labels, "", "ls", "-q"); code != 0 || out != "" {
		t.Fatalf("ls after rm: %d %q", code, out)
	}
	if code, _, errs := exec1("", id, "--", "true"); code != ExitUsage || !strings.Contains(errs, "no such session") {
		t.Fatalf("exec after rm: %d %s", code, errs)
	}
}

// The session's environment holds only allowlisted host variables.
func TestSessionCLIEnvFiltered(t *testing.T) {
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	vak := testenv.Vak(t)
	// Every host variable of hostenv.Allowlist, the list native and
	// docker runs pass too (sandboxtest's EnvScrubbed), with a value no
	// image sets.
	var allowed []string
	for _, n := range hostenv.Allowlist() {
		v := "vaktest-" + n
		if n == "LANG" || n == "LC_ALL" {
			v = "C.UTF-8"
		}
		allowed = append(allowed, n+"="+v)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(vak, append([]string{"--config", cfg, "session"}, args...)...)
		cmd.Env = append(append(os.Environ(), "CANARY_TOKEN=sk-canary", "AWS_SECRET_ACCESS_KEY=aws-canary"), allowed...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return string(out)
	}
	id := strings.TrimSpace(run(append([]string{"create"}, append(labels, "-w", ws)...)...))
	defer session(t, cfg, labels, "", "rm", id)
	env := run("exec", id, "--", "env")
	if strings.Contains(env, "canary") || strings.Contains(env, "VAK_") {
		t.Fatalf("host secrets reached the session:\n%s", env)
	}
	if !strings.Contains(env, "LANG=C.UTF-8") {
		t.Fatalf("allowlisted LANG missing (the environment was not passed at all?):\n%s", env)
	}
	for _, kv := range allowed {
		if !slices.Contains(strings.Split(env, "\n"), kv) {
			t.Errorf("allowlisted %s did not reach the session:\n%s", kv, env)
		}
	}
}

// A broker killed with SIGKILL leaves its session behind; `vak gc`
// removes it because its owner is gone. A broker that exits normally
// removes its session itself.
func TestSessionCLIKilledBroker(t *testing.T) {
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	hold := func() (*exec.Cmd, string) { return holdSession(t, cfg, labels, "-w", ws) }
	running := func(id string) bool {
		out, _ := exec.Command("docker", "ps", "-q", "--filter", "name=^"+taskenv.SessionPrefix+id+"$").Output()
		return strings.TrimSpace(string(out)) != ""
	}
	cmd, id := hold()
	if !running(id) {
		t.Fatal("no session container while the broker holds it")
	}
	if code, out, _ := session(t, cfg, labels, "", "exec", id, "--", "echo", "held"); code != 0 || out != "held\n" {
		t.Fatalf("exec in a held session: %d %q", code, out)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if !running(id) {
		t.Fatal("the session vanished with its broker: the gc test proves nothing")
	}
	// gc: its owner is gone.
	full := append([]string{"--config", cfg, "gc"}, labels...)
	var out, errb bytes.Buffer
	if code := Main(context.Background(), full, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb}); code != 0 {
		t.Fatalf("gc: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "removed "+id+": its owner process is gone") {
		t.Fatalf("gc output %q", out.String())
	}
	if running(id) {
		t.Fatal("gc left the orphaned session")
	}
	// A broker that is told to stop removes its session.
	cmd, id = hold()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("held broker exit: %v", err)
	}
	if running(id) {
		t.Fatal("the held session survived its broker's normal exit")
	}
}

// holdSession starts `vak session create --hold` with the create flags
// args and returns the running owner and the session's ID.
func holdSession(t *testing.T, cfg string, labels []string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(testenv.Vak(t), append(append([]string{"--config", cfg, "session", "create", "--hold"}, labels...), args...)...)
	stdout, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("create --hold: %v %s", err, errb.String())
	}
	return cmd, strings.TrimSpace(line)
}

// A `vak session exec` client killed with SIGKILL hangs up on the worker:
// its command is killed in the session, not left running with nobody to
// read its output. The check that the command is alive before the kill is
// the positive control for the one after it.
func TestSessionExecClientKilled(t *testing.T) {
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	id := createSession(t, cfg, labels, ws, "hangup")
	pidFile := filepath.Join(ws, "cmd.pid")
	cmd := exec.Command(testenv.Vak(t), append(append([]string{"--config", cfg, "session", "exec"}, labels...), id, "--", "sh", "-c", "echo $$ > cmd.pid.tmp && mv cmd.pid.tmp cmd.pid; sleep 300; touch finished")...)
	cmd.Dir = ws
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var pid string
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(pidFile)
		if err == nil {
			pid = strings.TrimSpace(string(b))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	alive := func() bool {
		code, _, _ := session(t, cfg, labels, "", "exec", id, "--", "sh", "-c", "kill -0 "+pid)
		return code == 0
	}
	if !alive() {
		t.Fatalf("the command (pid %s) is not running before its client is killed: the check cannot fail", pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	deadline = time.Now().Add(time.Minute)
	for alive() {
		if time.Now().After(deadline) {
			t.Fatal("the command still runs a minute after its client was killed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(ws, "finished")); err == nil {
		t.Fatal("the command ran to its end")
	}
}

// createSession creates a session for task in ws with cfg and labels and
// returns its ID; it is removed when the test ends.
func createSession(t *testing.T, cfg string, labels []string, ws, task string) string {
	t.Helper()
	code, out, errs := session(t, cfg, labels, "", "create", "-w", ws, "--task", task)
	if code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { session(t, cfg, labels, "", "rm", id) })
	return id
}

// installSession creates a session with session.allow_install (exec
// --root allowed) in a fresh workspace, removed when the test ends; extra
// are more create flags.
func installSession(t *testing.T, extra ...string) (cfg string, labels []string, id string) {
	t.Helper()
	_, labels = sessionEnv(t)
	cfg = writeConfig(t, "version = 1\n[sandbox]\nimage = \""+testenv.Image(t)+"\"\n[session]\nallow_install = true\n")
	code, out, errs := session(t, cfg, labels, "", "create", append([]string{"-w", tempWorkspace(t)}, extra...)...)
	if code != 0 {
		t.Fatalf("create: %d %s", code, errs)
	}
	id = strings.TrimSpace(out)
	t.Cleanup(func() { session(t, cfg, labels, "", "rm", id) })
	return cfg, labels, id
}

// With session.allow_install, `exec --root` runs as root through docker
// exec (no TTY needed), and what it installs is there for the next turn.
func TestSessionCLIRootInstall(t *testing.T) {
	cfg, labels, id := installSession(t)
	if code, out, errs := session(t, cfg, labels, "", "exec", "--root", id, "--", "sh", "-c", "echo pkg > /bin/installed-tool; id -u"); code != 0 || out != "0\n" {
		t.Fatalf("exec --root: %d %q %s", code, out, errs)
	}
	if code, out, _ := session(t, cfg, labels, "", "exec", id, "--", "cat", "/bin/installed-tool"); code != 0 || out != "pkg\n" {
		t.Fatalf("next turn: %d %q", code, out)
	}
	insp, err := exec.Command("docker", "inspect", "-f", "{{.HostConfig.CapAdd}}", taskenv.SessionPrefix+id).Output()
	if err != nil || !strings.Contains(string(insp), "CAP_SETUID") {
		t.Fatalf("install capabilities: %q %v", insp, err)
	}
}

// A paused session container (docker pause, through the Engine API) is
// reported by `vak session exec` with exit 69 and a message naming the
// container and `docker unpause`, through the worker (not after the
// worker's start timeout: the error is the paused one, not a deadline) and
// through docker exec (--root); after unpause the same execs work (the
// control, also run before the pause).
func TestSessionExecPaused(t *testing.T) {
	cfg, labels, id := installSession(t)
	name := taskenv.SessionPrefix + id
	execs := [][]string{{"exec", id, "--", "echo", "ok"}, {"exec", "--root", id, "--", "echo", "ok"}}
	works := func(when string) {
		t.Helper()
		for _, args := range execs {
			if code, out, errs := session(t, cfg, labels, "", args[0], args[1:]...); code != 0 || out != "ok\n" {
				t.Fatalf("%s: %v: %d %q %s", when, args, code, out, errs)
			}
		}
	}
	works("before the pause")
	eng, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	if _, err := eng.ContainerPause(ctx, name, client.ContainerPauseOptions{}); err != nil {
		t.Fatal(err)
	}
	paused := true
	unpause := func() {
		if paused {
			if _, err := eng.ContainerUnpause(ctx, name, client.ContainerUnpauseOptions{}); err != nil {
				t.Error(err)
			}
			paused = false
		}
	}
	defer unpause()
	for _, args := range execs {
		code, out, errs := session(t, cfg, labels, "", args[0], args[1:]...)
		if code != ExitUnavailable || out != "" || !strings.Contains(errs, name+" is paused") || !strings.Contains(errs, "docker unpause "+name) || strings.Contains(errs, "deadline") {
			t.Errorf("%v in a paused session: %d %q %s; want %d naming %s and docker unpause", args, code, out, errs, ExitUnavailable, name)
		}
	}
	unpause()
	works("after unpause")
}

// TestSessionExecEnvAllowlist: `vak session exec -e NAME` copies a host
// variable only when the sessions' allowlist names it, and sandbox.env of
// the trusted config extends that list as it does for the session's base
// environment.
func TestSessionExecEnvAllowlist(t *testing.T) {
	cfg, labels := sessionEnv(t)
	img := testenv.Image(t)
	withEnv := writeConfig(t, "version = 1\n[sandbox]\nimage = \""+img+"\"\nenv = [\"EXTRA_TOOL_FLAGS\"]\n")
	t.Setenv("EXTRA_TOOL_FLAGS", "copied")
	ws := tempWorkspace(t)
	id := createSession(t, cfg, labels, ws, "envlist")
	if code, _, errs := session(t, cfg, labels, "", "exec", "-e", "EXTRA_TOOL_FLAGS", id, "--", "true"); code != ExitUsage || !strings.Contains(errs, "not allowed") {
		t.Fatalf("without sandbox.env: %d %q, want %d and not allowed", code, errs, ExitUsage)
	}
	if code, out, errs := session(t, withEnv, labels, "", "exec", "-e", "EXTRA_TOOL_FLAGS", id, "--", "sh", "-c", "echo $EXTRA_TOOL_FLAGS"); code != 0 || out != "copied\n" {
		t.Fatalf("with sandbox.env: %d %q %q", code, out, errs)
	}
}

// TestSessionExecStdinStreams: `vak session exec -i` streams stdin: the
// command answers the first line before the second is written, and end of
// input reaches it.
func TestSessionExecStdinStreams(t *testing.T) {
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	id := createSession(t, cfg, labels, ws, "stream")

	pr, pw := io.Pipe()
	outw := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		full := append(append([]string{"--config", cfg, "session", "exec"}, labels...), "-i", id, "--", "sh", "-c", "read a; echo got:$a; read b; echo got:$b; cat; echo eof")
		var errb bytes.Buffer
		done <- Main(context.Background(), full, Stdio{In: pr, Out: outw, Err: &errb})
	}()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(outw.String(), what) {
			if time.Now().After(deadline) {
				pw.Close()
				t.Fatalf("no %q in the output while stdin is still open: %q", what, outw.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	io.WriteString(pw, "one\n")
	// The command answers while stdin is still open: streamed, not read
	// to the end first.
	waitFor("got:one\n")
	io.WriteString(pw, "two\nrest\n")
	waitFor("got:two\n")
	pw.Close()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %q", code, outw.String())
	}
	if got := outw.String(); got != "got:one\ngot:two\nrest\neof\n" {
		t.Fatalf("output %q", got)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a poller.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A session's worker keeps the tripwire's walk of the workspace current
// between commands (fsguard.Watch, from the second command on): what later
// commands plant, in directories they create in one go, move in or
// rename, is still removed and reported through `vak session exec` (by the
// worker's check, or by the session's workspace watcher, which may be
// first). The directories around each plant survive: the commands did run.
func TestSessionExecTripwire(t *testing.T) {
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	if err := os.MkdirAll(filepath.Join(ws, "lib", "repo", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := createSession(t, cfg, labels, ws, "tripwire")
	for _, tc := range []struct{ cmd, removed, kept string }{
		{"true", "", ""},
		{"mkdir -p a/b/c/.git && echo x > a/b/c/.git/config", "a/b/c/.git", "a/b/c"},
		{"mkdir -p /tmp/x/y/.git && mv /tmp/x lib/x", "lib/x/y/.git", "lib/x/y"},
		{"mkdir -p lib/plain/objects && mv lib/plain lib/.git", "lib/.git", "lib/repo/.git"},
		{"mkdir -p d/e && mv d lib/d && echo 'gitdir: /x' > lib/d/e/.GIT", "lib/d/e/.GIT", "lib/d/e"},
	} {
		code, _, errs := session(t, cfg, labels, "", "exec", id, "--", "sh", "-c", tc.cmd)
		if tc.removed == "" {
			if code != 0 || strings.Contains(errs, "protected path") || strings.Contains(errs, "removed") {
				t.Fatalf("%q: %d %s", tc.cmd, code, errs)
			}
			continue
		}
		if code != 0 {
			// The session's workspace watcher may remove a .git while the
			// command still writes into it.
			t.Logf("%q: exit %d %s", tc.cmd, code, errs)
		}
		// Reported by the worker's check after the command, or by the
		// watcher, which exec prints when it logged it during the command
		// and its log keeps, for vak session rm. The watcher removes in
		// the container and its host side logs when the news arrives: a
		// removal late in the command can reach the log after exec read
		// it, so the log is waited for.
		if !strings.Contains(errs, "protected path "+tc.removed+";") && !strings.Contains(errs, "removed "+tc.removed+":") {
			waitFor(t, "the watcher's report of "+tc.removed+" (exec printed "+strconv.Quote(errs)+")", func() bool {
				log, _ := os.ReadFile(filepath.Join(sessionWatchDir(id), "log"))
				return strings.Contains(string(log), "removed "+tc.removed+":")
			})
		}
		if _, err := os.Lstat(filepath.Join(ws, tc.removed)); err == nil {
			t.Errorf("%q: %s survived", tc.cmd, tc.removed)
		}
		if _, err := os.Lstat(filepath.Join(ws, tc.kept)); err != nil {
			t.Errorf("%q: %s is gone too: %v", tc.cmd, tc.kept, err)
		}
	}
}
