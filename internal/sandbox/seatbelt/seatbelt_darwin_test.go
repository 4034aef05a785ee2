//go:build darwin

package seatbelt

// Adversarial tests against the real Seatbelt. Each attempts an escape,
// asserts that it failed, and proves the attempt was real: the target exists
// and is reachable without the sandbox, or the same operation succeeds on a
// permitted target.

import (
	"bufio"
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

	"vak/internal/sandbox"
	"vak/internal/testenv"
)

// EnvRequireSeatbelt turns a missing Seatbelt into a failure (macOS CI sets
// it); locally the tests skip, for example inside another sandbox.
const EnvRequireSeatbelt = "VAK_REQUIRE_SEATBELT"

func requireSeatbelt(t *testing.T) {
	t.Helper()
	if err := New().Available(context.Background()); err != nil {
		testenv.Missing(t, EnvRequireSeatbelt, err.Error())
	}
}

type world struct {
	home, ws, tmp, outside string
	secret, marker         string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &world{
		home: root + "/home", ws: root + "/home/proj", tmp: root + "/tmp", outside: root + "/outside",
		marker: fmt.Sprintf("VAK-SEATBELT-SECRET-%d-%d", os.Getpid(), time.Now().UnixNano()),
	}
	for _, d := range []string{w.home + "/.ssh", w.ws + "/.git/hooks", w.tmp, w.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w.secret = w.home + "/.ssh/id_ed25519"
	for f, content := range map[string]string{
		w.secret:                   w.marker + "\n",
		w.ws + "/README":           "hello\n",
		w.ws + "/.git/config":      "[core]\n",
		w.outside + "/secret.txt":  w.marker + "\n",
		w.ws + "/.git/description": "x\n",
	} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *world) policy(mode sandbox.Mode) Policy {
	return Policy{Workspace: w.ws, Mode: mode, TempDir: w.tmp, UserHome: w.home}
}

// run runs script with /bin/sh under the sandbox, in the workspace.
func (w *world) run(t *testing.T, p Policy, script string) (string, error) {
	t.Helper()
	cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, "PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME="+w.home, "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (w *world) mustRun(t *testing.T, p Policy, script string) string {
	t.Helper()
	out, err := w.run(t, p, script)
	if err != nil {
		t.Fatalf("control %q failed under the sandbox: %v\n%s", script, err, out)
	}
	return out
}

func (w *world) mustFail(t *testing.T, p Policy, script string) {
	t.Helper()
	out, err := w.run(t, p, script)
	if err == nil {
		t.Fatalf("escape %q succeeded under the sandbox:\n%s", script, out)
	}
	if strings.Contains(out, w.marker) {
		t.Fatalf("escape %q leaked the secret:\n%s", script, out)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func TestAvailable(t *testing.T) {
	requireSeatbelt(t)
	b := New()
	for range 2 { // the second answer comes from the cache
		if err := b.Available(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoldenProfilesCompile runs /usr/bin/true under every golden profile,
// so this macOS is known to compile each construct Profile emits, awkward
// paths included.
func TestGoldenProfilesCompile(t *testing.T) {
	requireSeatbelt(t)
	for name, p := range goldenPolicies() {
		prof, err := Profile(p)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(SandboxExec, "-p", prof, "--", "/usr/bin/true").CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", name, err, out)
		}
	}
}

func TestReadSecrets(t *testing.T) {
	requireSeatbelt(t)
	w := newWorld(t)
	p := w.policy(sandbox.WorkspaceWrite)
	if got := w.mustRun(t, p, "cat README"); got != "hello\n" {
		t.Fatalf("control read = %q", got)
	}
	if b, err := os.ReadFile(w.secret); err != nil || !strings.Contains(string(b), w.marker) {
		t.Fatalf("the planted secret is not readable outside the sandbox: %v", err)
	}
	w.mustFail(t, p, "cat "+w.secret)
	w.mustFail(t, p, "cat ~/.ssh/id_ed25519")
	w.mustFail(t, p, "ls ~/.ssh")
	w.mustFail(t, p, "cat "+w.outside+"/secret.txt")
	upper := strings.ToUpper(w.home[:2]) + w.home[2:] // /PRIVATE/... on a case-insensitive volume
	w.mustFail(t, p, "cat "+upper+"/.ssh/id_ed25519")
	if err := os.Symlink(w.secret, w.ws+"/link"); err != nil {
		t.Fatal(err)
	}
	w.mustFail(t, p, "cat link")
	alias := "/System/Volumes/Data" + w.secret
	if b, err := os.ReadFile(alias); err == nil && strings.Contains(string(b), w.marker) {
		w.mustFail(t, p, "cat "+alias)
	} else {
		t.Logf("data-volume alias %s not reachable here (%v); alias check skipped", alias, err)
	}
}

func TestWrites(t *testing.T) {
	requireSeatbelt(t)
	w := newWorld(t)
	ww := w.policy(sandbox.WorkspaceWrite)
	w.mustRun(t, ww, `echo x > new.txt && echo x > "$TMPDIR/t" && echo x > .git/description && mkdir -p src/a && echo x > /dev/null`)
	for _, f := range []string{w.ws + "/new.txt", w.tmp + "/t", w.ws + "/src/a"} {
		if !exists(f) {
			t.Fatalf("control write to %s left nothing", f)
		}
	}
	w.mustFail(t, ww, "echo x > "+w.outside+"/f")
	w.mustFail(t, ww, "echo x > ~/.zshrc")
	w.mustFail(t, ww, "echo x > /private/tmp/vak-seatbelt-escape")
	for _, f := range []string{w.outside + "/f", w.home + "/.zshrc", "/private/tmp/vak-seatbelt-escape"} {
		if exists(f) {
			os.Remove(f)
			t.Fatalf("escape created %s", f)
		}
	}

	ro := w.policy(sandbox.ReadOnly)
	w.mustRun(t, ro, `cat README >/dev/null && echo x > "$TMPDIR/ro"`)
	w.mustFail(t, ro, "echo x > ro.txt")
	w.mustFail(t, ro, "rm README")
	if exists(w.ws+"/ro.txt") || !exists(w.ws+"/README") {
		t.Fatal("read-only workspace was modified")
	}
}

func TestProtectedPaths(t *testing.T) {
	requireSeatbelt(t)
	w := newWorld(t)
	p := w.policy(sandbox.WorkspaceWrite)
	p.Protected = []string{"Makefile"}
	w.mustRun(t, p, "echo x > .git/description && echo x > notes")
	for _, script := range []string{
		"echo x > .git/hooks/pre-commit",
		"echo '[core] fsmonitor = touch /tmp/pwned' >> .git/config",
		"rm .git/config",
		"mv .git .git2",
		"rm -rf .git/hooks",
		"mkdir .vak",
		"mkdir .VAK",
		"mkdir -p .Vak && echo x > .Vak/config.toml",
		"echo x > Makefile",
		"echo x > MAKEFILE",
		"ln .git/config hardlink",
		"ln notes .git/hooks/post-checkout",
		"mkdir \"$TMPDIR/g\" && echo x > \"$TMPDIR/g/config\" && mv \"$TMPDIR/g\" .git/hooks",
	} {
		w.mustFail(t, p, script)
	}
	if b, err := os.ReadFile(w.ws + "/.git/config"); err != nil || string(b) != "[core]\n" {
		t.Fatalf(".git/config changed: %q, %v", b, err)
	}
	entries, _ := os.ReadDir(w.ws + "/.git/hooks")
	for _, e := range []string{".vak", ".VAK", ".Vak", "Makefile", "MAKEFILE", "hardlink", ".git2"} {
		if exists(w.ws + "/" + e) {
			t.Errorf("escape created %s", e)
		}
	}
	if len(entries) != 0 {
		t.Errorf(".git/hooks gained %d entries", len(entries))
	}

	// A workspace without .git cannot grow one.
	if err := os.RemoveAll(w.ws + "/.git"); err != nil {
		t.Fatal(err)
	}
	w.mustFail(t, p, "mkdir .git")
	w.mustFail(t, p, "mkdir .GIT && echo x > .GIT/config")
	if exists(w.ws+"/.git") || exists(w.ws+"/.GIT") {
		t.Fatal("escape created a .git directory")
	}
}

// listener counts the first byte of every connection it accepts, so a test
// can tell the sandbox's attempt ("S") from its own control ("C") without
// timing: connections are accepted in the order they were made.
type listener struct {
	ln  net.Listener
	got chan byte
}

func listen(t *testing.T, network, addr string) *listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{ln: ln, got: make(chan byte, 16)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, _ := bufio.NewReader(c).ReadByte()
			c.Close()
			l.got <- b
		}
	}()
	return l
}

// control connects from the test and returns every byte seen until its own.
func (l *listener) control(t *testing.T) []byte {
	t.Helper()
	c, err := net.Dial(l.ln.Addr().Network(), l.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("C"))
	c.Close()
	var seen []byte
	for b := range l.got {
		if b == 'C' {
			return seen
		}
		seen = append(seen, b)
	}
	return seen
}

func TestNetwork(t *testing.T) {
	requireSeatbelt(t)
	w := newWorld(t)
	// Unix socket paths are limited to 104 bytes: keep these short.
	short, err := os.MkdirTemp("/private/tmp", "vk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	if err := os.Mkdir(short+"/t", 0o700); err != nil {
		t.Fatal(err)
	}
	p := w.policy(sandbox.WorkspaceWrite)
	p.TempDir = short + "/t"

	tcp := listen(t, "tcp", "127.0.0.1:0")
	port := tcp.ln.Addr().(*net.TCPAddr).Port
	w.mustFail(t, p, fmt.Sprintf(`/bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf S >&3'`, port))
	if seen := tcp.control(t); len(seen) != 0 {
		t.Fatalf("the sandbox reached a loopback port: %q", seen)
	}

	host := listen(t, "unix", short+"/host.sock") // a host daemon's socket
	w.mustFail(t, p, "printf S | /usr/bin/nc -U "+short+"/host.sock")
	if seen := host.control(t); len(seen) != 0 {
		t.Fatalf("the sandbox reached a host unix socket: %q", seen)
	}

	own := listen(t, "unix", short+"/t/own.sock") // in the session temp dir
	w.mustRun(t, p, "printf S | /usr/bin/nc -U "+short+"/t/own.sock")
	if seen := own.control(t); string(seen) != "S" {
		t.Fatalf("control: the sandbox could not reach a socket in its temp dir: %q", seen)
	}
}

func TestEnvironment(t *testing.T) {
	requireSeatbelt(t)
	w := newWorld(t)
	t.Setenv("VAK_TEST_HOST_TOKEN", w.marker)
	cmd, err := Command(context.Background(), w.policy(sandbox.ReadOnly), []string{"/usr/bin/env"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "HOME=" + w.tmp + "/home\nTMPDIR=" + w.tmp; strings.TrimSpace(string(out)) != want {
		t.Fatalf("environment = %q, want %q", out, want)
	}
}

// TestLaunchdEscape submits a launchd job, which would run outside the
// sandbox, and checks that launchd never got it.
func TestLaunchdEscape(t *testing.T) {
	requireSeatbelt(t)
	w := newWorld(t)
	label := fmt.Sprintf("vak.test.seatbelt.escape.%d", os.Getpid())
	t.Cleanup(func() { exec.Command("/bin/launchctl", "remove", label).Run() })
	if err := exec.Command("/bin/launchctl", "list", label).Run(); err == nil {
		t.Fatalf("launchd already has %s", label)
	}
	w.mustFail(t, w.policy(sandbox.WorkspaceWrite), "/bin/launchctl submit -l "+label+" -- /usr/bin/touch "+w.outside+"/escaped")
	err := exec.Command("/bin/launchctl", "list", label).Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("launchd accepted a job from the sandbox (launchctl list %s: %v)", label, err)
	}
}
