package docker

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"vak/internal/engine"
	"vak/internal/sandbox"
	"vak/internal/shellquote"
)

func TestWrapStructure(t *testing.T) {
	b := &Backend{Image: "img:1", User: User{UID: 1000, GID: 1001}, Labels: map[string]string{"vak.test": "1"}}
	c := sandbox.Command{ID: "abc", Shell: `echo 'it'\''s' "$HOME"`, Workspace: "/home/u/proj", Mode: sandbox.WorkspaceWrite}
	got, err := b.Wrap(c)
	if err != nil {
		t.Fatal(err)
	}
	profile, err := SeccompFile()
	if err != nil {
		t.Fatal(err)
	}
	owner, err := engine.OwnerToken(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"docker", "run", "-i", "--rm",
		"--network", "none",
		"--memory", "2147483648",
		"--cpus", "2",
		"--pids-limit", "256",
		"--cap-drop", "ALL",
		"--security-opt", "no-new-privileges",
		"--runtime", "runc",
		"--security-opt", "seccomp=" + profile,
		"-v", "/home/u/proj:/home/u/proj",
		"--tmpfs", "/tmp:rw,nosuid,nodev,exec,size=536870912",
		"-w", "/home/u/proj",
		"--user", "1000:1001",
		"-e", "HOME=/tmp", "-e", "TMPDIR=/tmp",
		"--name", "vak-run-abc",
		"--label", "vak.managed=true", "--label", "vak.kind=run", "--label", "vak.run=abc",
		"--label", "vak.workspace=/home/u/proj",
		"--label", "vak.owner=" + strconv.Itoa(os.Getuid()), "--label", "vak.owner.pid=" + owner,
		"--label", "vak.test=1",
		"img:1", "sh", "-c", LifelineInit, "vak-run", c.Shell,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Wrap =\n%q\nwant\n%q", got, want)
	}

	// ReadOnly: --read-only root and the workspace mounted :ro.
	c.Mode, c.Dir = sandbox.ReadOnly, "/home/u/proj/sub"
	c.Limits = sandbox.Limits{Memory: 1 << 30, CPUs: 0.5, Pids: 32, TmpfsSize: 1 << 20}
	b.User = User{Root: true}
	got, err = b.Wrap(c)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, " ")
	for _, s := range []string{"--read-only -v /home/u/proj:/home/u/proj:ro --tmpfs", "-w /home/u/proj/sub", "--memory 1073741824 --cpus 0.5 --pids-limit 32", "size=1048576", "--user 0:0"} {
		if !strings.Contains(joined, s) {
			t.Errorf("read-only wrap %q lacks %q", joined, s)
		}
	}
	// The argv survives the second quoting layer (the worker's sh -c) intact:
	// the last element reaching docker is exactly the command line.
	line := shellquote.Join(got)
	if !strings.Contains(line, shellquote.Quote(c.Shell)) {
		t.Errorf("joined line %q does not carry the quoted command", line)
	}
}

func TestWrapRefuses(t *testing.T) {
	b := &Backend{}
	ok := sandbox.Command{ID: "x", Shell: "true", Workspace: "/w", Mode: sandbox.WorkspaceWrite}
	for _, tc := range []struct {
		name string
		mod  func(*sandbox.Command)
		err  error
	}{
		{"full access", func(c *sandbox.Command) { c.Mode = sandbox.FullAccess }, ErrFullAccess},
		{"no mode", func(c *sandbox.Command) { c.Mode = 0 }, sandbox.ErrUnknownMode},
		{"no id", func(c *sandbox.Command) { c.ID = "" }, ErrNoID},
		{"relative workspace", func(c *sandbox.Command) { c.Workspace = "w" }, ErrNotAbsolute},
		{"unclean workspace", func(c *sandbox.Command) { c.Workspace = "/w/../etc" }, ErrNotAbsolute},
		{"root workspace", func(c *sandbox.Command) { c.Workspace = "/" }, ErrNotAbsolute},
		{"colon in workspace", func(c *sandbox.Command) { c.Workspace = "/w:/etc" }, ErrInvalidMountPath},
		{"comma in workspace", func(c *sandbox.Command) { c.Workspace = "/w,x" }, ErrInvalidMountPath},
		{"dir outside", func(c *sandbox.Command) { c.Dir = "/etc" }, ErrDirOutside},
		{"dir prefix trick", func(c *sandbox.Command) { c.Dir = "/wx" }, ErrDirOutside},
		{"dir dotdot", func(c *sandbox.Command) { c.Dir = "/w/../etc" }, ErrDirOutside},
		{"bad env", func(c *sandbox.Command) { c.Env = []string{"NOEQUALS"} }, nil},
		{"pin outside", func(c *sandbox.Command) { c.Protection.Pin = []string{"/etc"} }, ErrInvalidMountPath},
		{"pin is the workspace", func(c *sandbox.Command) { c.Protection.Pin = []string{"/w"} }, ErrInvalidMountPath},
		{"pin with colon", func(c *sandbox.Command) { c.Protection.Pin = []string{"/w/a:/etc"} }, ErrInvalidMountPath},
		{"protected outside", func(c *sandbox.Command) { c.Protection.ReadOnly = []string{"/w/../etc"} }, ErrInvalidMountPath},
	} {
		c := ok
		tc.mod(&c)
		_, err := b.Wrap(c)
		if err == nil || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Errorf("%s: Wrap err = %v, want %v", tc.name, err, tc.err)
		}
	}
	if _, err := b.Wrap(ok); err != nil {
		t.Fatalf("valid command refused: %v", err)
	}
}

func TestWrapProxiedNetwork(t *testing.T) {
	b := &Backend{Image: "img", User: User{UID: 1, GID: 1}}
	c := sandbox.Command{ID: "n", Shell: "true", Workspace: "/w", Mode: sandbox.WorkspaceWrite,
		Network: &sandbox.NetworkAttachment{
			Mode:   "container:vak-nc-k",
			Binds:  []string{"/state/trust:/etc/vak/trust:ro"},
			Env:    []string{"SSL_CERT_FILE=/etc/vak/trust/ca-bundle.pem", "GH_TOKEN=vakph_x"},
			Labels: map[string]string{"vak.proxynet.user": "k"},
		}}
	got, err := b.Wrap(c)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, " ")
	// --runtime runc: a daemon's default-runtime (gVisor, say) never
	// carries the proxied network.
	for _, want := range []string{"--runtime runc", "--network container:vak-nc-k", "-v /state/trust:/etc/vak/trust:ro", "-e SSL_CERT_FILE=/etc/vak/trust/ca-bundle.pem", "-e GH_TOKEN=vakph_x", "--label vak.proxynet.user=k", "--cap-drop ALL"} {
		if !strings.Contains(joined, want) {
			t.Errorf("proxied wrap lacks %q: %s", want, joined)
		}
	}
	if strings.Contains(joined, "--network none") || strings.Contains(joined, "NET_ADMIN") || strings.Contains(joined, "NET_RAW") {
		t.Errorf("proxied wrap: %s", joined)
	}
	for _, bad := range []*sandbox.NetworkAttachment{
		{Mode: "host"}, {Mode: "bridge"}, {Mode: "container:x", Binds: []string{"/etc:/etc"}},
	} {
		c.Network = bad
		if _, err := b.Wrap(c); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

// Pinned directories are bound read-write onto themselves and protected
// paths read-only, in workspace-write only (read-only mounts all of it :ro),
// each checked by MountCheck in the container (type and, under runc on
// Linux, inode; a runtime that numbers inodes itself gets "-"); a path that
// is a symlink by the time the container is described is refused.
func TestWrapPinsAndProtected(t *testing.T) {
	w := t.TempDir()
	for _, d := range []string{".git", "sub/.git/hooks"} {
		os.MkdirAll(filepath.Join(w, d), 0o755)
	}
	os.WriteFile(filepath.Join(w, ".git", "config"), nil, 0o644)
	ino := func(p string) string {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if runtime.GOOS != "linux" {
			return "-"
		}
		return strconv.FormatUint(fi.Sys().(*syscall.Stat_t).Ino, 10)
	}
	b := &Backend{Image: "img", User: User{UID: 1, GID: 1}}
	c := sandbox.Command{ID: "p", Shell: "true", Workspace: w, Mode: sandbox.WorkspaceWrite,
		Protection: sandbox.Protection{Pin: []string{w + "/.git", w + "/sub/.git"}, ReadOnly: []string{w + "/.git/config", w + "/sub/.git/hooks"}}}
	got, err := b.Wrap(c)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got, " ")
	for _, want := range []string{"-v " + w + "/.git:" + w + "/.git ", "-v " + w + "/sub/.git:" + w + "/sub/.git ", "-v " + w + "/.git/config:" + w + "/.git/config:ro", "-v " + w + "/sub/.git/hooks:" + w + "/sub/.git/hooks:ro"} {
		if !strings.Contains(joined, want) {
			t.Errorf("wrap lacks %q: %s", want, joined)
		}
	}
	tail := []string{"sh", "-c", MountCheck + LifelineInit, "vak-run", "true",
		"d", ino(w + "/.git"), w + "/.git", "d", ino(w + "/sub/.git"), w + "/sub/.git",
		"f", ino(w + "/.git/config"), w + "/.git/config", "d", ino(w + "/sub/.git/hooks"), w + "/sub/.git/hooks"}
	if len(got) < len(tail) || !slices.Equal(got[len(got)-len(tail):], tail) {
		t.Errorf("the container's command = %q, want %q", got[len(got)-len(tail):], tail)
	}
	gb := &Backend{Image: "img", User: User{UID: 1, GID: 1}, Runtime: "runsc"}
	if g, err := gb.Wrap(c); err != nil || !slices.Equal(g[len(g)-3:], []string{"d", "-", w + "/sub/.git/hooks"}) {
		t.Errorf("under another runtime: %q %v", g[len(g)-3:], err)
	}
	// Swapped for a link after the plan, before the wrap.
	os.Rename(w+"/sub/.git/hooks", w+"/sub/.git/hooks-old")
	os.Symlink("/etc", w+"/sub/.git/hooks")
	if _, err := b.Wrap(c); !errors.Is(err, ErrInvalidMountPath) || !strings.Contains(err.Error(), "was it replaced") {
		t.Errorf("a protected path now a symlink: %v", err)
	}
	c.Mode = sandbox.ReadOnly
	if got, err = b.Wrap(c); err != nil {
		t.Fatal(err)
	}
	if joined := strings.Join(got, " "); strings.Contains(joined, w+"/.git") {
		t.Errorf("read-only wrap mounts pinned or protected paths separately: %s", joined)
	}
}

// A persistent home is bound read-write at PersistentHome (in read-only
// mode too) and becomes HOME; a home path that cannot be bound, or a
// workspace that overlaps the container's home, is refused.
func TestWrapPersistentHome(t *testing.T) {
	b := &Backend{}
	for _, mode := range []sandbox.Mode{sandbox.WorkspaceWrite, sandbox.ReadOnly} {
		c := sandbox.Command{ID: "x", Shell: "true", Workspace: "/w", Mode: mode, AgentHome: "/state/vak/homes/workspace/abc"}
		got, err := b.Wrap(c)
		if err != nil {
			t.Fatal(err)
		}
		joined := strings.Join(got, " ")
		if !strings.Contains(joined, "-v /state/vak/homes/workspace/abc:"+PersistentHome+" -e HOME="+PersistentHome+" ") {
			t.Errorf("%s: wrap %q lacks the home bind and HOME", mode, joined)
		}
		if strings.Contains(joined, "HOME=/tmp") {
			t.Errorf("%s: wrap %q still sets HOME=/tmp", mode, joined)
		}
	}
	for _, tc := range []struct{ home, ws string }{
		{"relative/home", "/w"},
		{"/a/../b", "/w"},
		{"/h:/etc", "/w"},
		{"/h,x", "/w"},
		{"/h\n", "/w"},
		{"/h", PersistentHome},
		{"/h", PersistentHome + "/src"},
		{"/h", "/home"},
	} {
		_, err := b.Wrap(sandbox.Command{ID: "x", Shell: "true", Workspace: tc.ws, Mode: sandbox.WorkspaceWrite, AgentHome: tc.home})
		if !errors.Is(err, ErrInvalidMountPath) {
			t.Errorf("home %q workspace %q: %v, want ErrInvalidMountPath", tc.home, tc.ws, err)
		}
	}
}

// TestWrapInteractive: the interactive argv is the host script, the
// container's name, the exec flags and the command, then Wrap's docker run
// argv with the keeper as the init instead of the command (the keeper's
// container has the same mounts, limits, user and environment; the
// command joins it through docker exec). Its stdin stays the lifeline:
// docker run never gets a terminal.
func TestWrapInteractive(t *testing.T) {
	b := &Backend{Image: "img:1", User: User{UID: 1000, GID: 1001}, Labels: map[string]string{"vak.test": "1"}}
	c := sandbox.Command{ID: "abc", Shell: `exec vi 'a b'`, Workspace: "/home/u/proj", Mode: sandbox.WorkspaceWrite, Env: []string{"TERM=xterm"}}
	plain, err := b.Wrap(c)
	if err != nil {
		t.Fatal(err)
	}
	run := plain[:len(plain)-5] // without sh -c LifelineInit vak-run SHELL
	for _, tc := range []struct {
		tty   bool
		flags string
	}{{true, "-it"}, {false, "-i"}} {
		got, err := b.WrapInteractive(c, tc.tty)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]string{"sh", "-c", interactiveScript, "vak-run-interactive", "docker", "vak-run-abc", tc.flags, c.Shell}, run...)
		want = append(want, "sh", "-c", KeeperInit)
		if !slices.Equal(got, want) {
			t.Errorf("WrapInteractive(tty=%v) =\n%q\nwant\n%q", tc.tty, got, want)
		}
		if slices.Contains(got, "-t") || slices.Contains(got, "--tty") {
			t.Errorf("the keeper's docker run has a terminal: %q", got)
		}
	}
	// Wrap's refusals hold.
	c.Mode = sandbox.FullAccess
	if _, err := b.WrapInteractive(c, true); !errors.Is(err, ErrFullAccess) {
		t.Errorf("full access: %v", err)
	}
}
