package taskenv

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/paths"
)

// A synthetic host for the pure checks: a home with credentials, a
// workspace, another session's workspace, a socket and symlinks.
type guardHost struct {
	root, home, ws, other, sock string
	never                       []protectedPath
}

func newGuardHost(t testing.TB) *guardHost {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := &guardHost{root: root, home: filepath.Join(root, "home", "u"), ws: filepath.Join(root, "src", "ws"), other: filepath.Join(root, "src", "other")}
	for _, d := range []string{h.home + "/.ssh", h.home + "/.config/gcloud", h.home + "/.kube", h.home + "/cache", h.ws + "/sub", h.other, root + "/links", root + "/data/deep"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(h.home+"/.netrc", []byte("x"), 0o600)
	os.Symlink(h.home+"/.ssh", root+"/links/to-ssh")
	os.Symlink(h.home, root+"/links/to-home")
	os.Symlink(h.other, root+"/links/to-other")
	os.Symlink(root+"/data", root+"/links/to-data")
	h.sock = filepath.Join(root, "links", "d.sock")
	if ln, err := net.Listen("unix", h.sock); err == nil {
		t.Cleanup(func() { ln.Close() })
	}
	h.never = neverMount(h.home, []string{h.other})
	return h
}

func TestCheckMount(t *testing.T) {
	h := newGuardHost(t)
	stateDir, _ := paths.StateDir()
	configDir, _ := paths.ConfigDir()
	refused := []struct{ path, protected string }{
		{"/var/run/docker.sock", "docker.sock"},
		{"/run", "/run/"},
		{"/var", "/var/run/"},
		{"/", "/"},
		{h.home + "/.ssh", h.home + "/.ssh"},
		{h.home + "/.ssh/id_ed25519", h.home + "/.ssh"},
		{h.home, h.home + "/."}, // contains credentials
		{filepath.Dir(h.home), h.home + "/."},
		{h.home + "/.netrc", ".netrc"},
		{h.home + "/.config", ".config/gcloud"},
		{h.root + "/links/to-ssh", h.home + "/.ssh"},                 // symlink
		{h.root + "/links/to-home", h.home + "/."},                   // symlink to a parent
		{h.ws + "/../../home/u/.kube", h.home + "/.kube"},            // ..
		{h.ws + "/sub/../../../home/u/cache/../.ssh", ".ssh"},        // .. through a real dir
		{h.root + "/links/to-data/../home/u/.ssh", h.home + "/.ssh"}, // .. after a symlink
		{h.other, "another session's workspace"},
		{h.other + "/x/..", "another session's workspace"},
		{h.root + "/links/to-other", "another session's workspace"},
		{filepath.Dir(h.other), "another session's workspace"}, // contains it
		{stateDir, "vak's own"},
		{configDir, "vak's own"},
		{h.sock, "socket"},
		{"/root/.ssh", "/root/.ssh"},
		{"/etc", "/etc/shadow"},
		{"relative/path", "absolute"},
	}
	for _, tc := range refused {
		_, err := checkMount(tc.path, h.never)
		if !errors.Is(err, ErrForbiddenMount) {
			t.Errorf("%s: accepted (%v)", tc.path, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.protected) && !strings.Contains(err.Error(), strings.TrimSuffix(tc.protected, "/.")) {
			t.Errorf("%s: error %q does not name %q", tc.path, err, tc.protected)
		}
	}
	for _, ok := range []string{h.ws, h.ws + "/sub", h.root + "/data/deep", h.root + "/links/to-data", h.home + "/cache"} {
		got, err := checkMount(ok, h.never)
		if err != nil {
			t.Errorf("%s: refused: %v", ok, err)
		}
		if real, _ := filepath.EvalSymlinks(ok); got != real {
			t.Errorf("%s: mounts %q, want the resolved %q", ok, got, real)
		}
	}
}

// FuzzCheckMount: whatever path is asked for, an accepted one is never, is
// not inside and does not contain a protected path, as written or resolved.
func FuzzCheckMount(f *testing.F) {
	for _, s := range []string{"src/ws", "home/u/.ssh", "links/to-ssh/..", "links/to-data/../home", "src/../home/u/cache", "/", "links/d.sock", "data/./deep/../.."} {
		f.Add(s)
	}
	h := newGuardHost(f)
	f.Fuzz(func(t *testing.T, rel string) {
		p := filepath.Join(h.root, rel)
		if strings.HasPrefix(rel, "/") {
			p = rel
		}
		got, err := checkMount(p, h.never)
		if err != nil {
			return
		}
		for _, form := range []string{filepath.Clean(p), got} {
			for _, n := range h.never {
				if form == "/" || form == n.path || paths.Within(n.path, form) || paths.Within(form, n.path) {
					t.Fatalf("accepted %q (%q) overlapping %q", p, got, n.path)
				}
			}
		}
		if fi, err := os.Stat(got); err == nil && fi.Mode()&os.ModeSocket != 0 {
			t.Fatalf("accepted a socket %q", p)
		}
	})
}

// Live: a forbidden mount request is refused before anything is created;
// the same request with a harmless path succeeds and the path is visible in
// the container (the attempt was real). The workspace itself must pass the
// same checks.
func TestSessionForbiddenMounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ws := f.workspace()
	other := f.create(Spec{Task: "other", Workspace: f.workspace(), BaseImage: f.image})
	stateDir, _ := paths.StateDir()
	links, _ := filepath.EvalSymlinks(t.TempDir())
	os.Symlink(f.home+"/.ssh", links+"/ssh")
	os.Symlink("/var/run", links+"/run")
	os.Symlink(other.Workspace(), links+"/ws")
	for _, p := range []string{
		"/var/run/docker.sock", "/run", links + "/run/docker.sock", links + "/run",
		f.home + "/.ssh", links + "/ssh", links + "/ssh/../.aws", f.home, ws + "/../../../" + strings.TrimPrefix(f.home, "/") + "/.kube",
		other.Workspace(), links + "/ws", filepath.Dir(other.Workspace()),
		stateDir, f.m.StateDir + "/../" + filepath.Base(f.m.StateDir),
	} {
		spec := f.spec(ws)
		spec.Mounts = []string{p}
		s, err := f.m.Create(ctx, spec)
		if !errors.Is(err, ErrForbiddenMount) {
			if s != nil {
				s.Discard(ctx)
			}
			t.Errorf("mount %s: %v, want ErrForbiddenMount", p, err)
			continue
		}
		t.Logf("refused: %v", err)
	}
	// Workspaces that expose credentials or another workspace.
	for _, w := range []string{f.home, filepath.Dir(other.Workspace())} {
		if _, err := f.m.Create(ctx, Spec{Workspace: w, BaseImage: f.image}); !errors.Is(err, ErrForbiddenMount) {
			t.Errorf("workspace %s: %v", w, err)
		}
	}
	list, err := f.m.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("refused requests created containers: %+v %v", list, err)
	}
	// Control: a harmless extra mount is mounted, read-only, at its path.
	extra, _ := filepath.EvalSymlinks(t.TempDir())
	os.WriteFile(extra+"/visible", []byte("yes"), 0o644)
	os.Chmod(extra, 0o755)
	spec := f.spec(ws)
	spec.Mounts = []string{extra}
	s := f.create(spec)
	if r := sh(t, s, "cat "+extra+"/visible; (echo x > "+extra+"/w) 2>/dev/null && echo WROTE"); r.Stdout != "yes" {
		t.Fatalf("control mount: %+v", r)
	}
}

// The worker refuses to serve when a mount is not the inode the broker
// checked (a path swapped for a symlink between check and mount; the swap
// itself is a race, so the test hands the worker a wrong identity).
func TestSessionMountIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.m.mutatePlan = func(p *plan) { p.identity[0].Ino++ }
	_, err := f.m.Create(context.Background(), f.spec(f.workspace()))
	if err == nil || !strings.Contains(err.Error(), "was it replaced") {
		t.Fatalf("Create with a swapped mount: %v", err)
	}
	if list, _ := f.m.List(context.Background()); len(list) != 0 {
		t.Fatalf("the refused session was left behind: %+v", list)
	}
}

// The worker refuses a mount that is not the path vak checked. The attack:
// between the plan (which checked the path against the never-mounted list)
// and the mount, a protected file in the workspace is swapped for a symlink
// to a credential outside it, which the daemon follows. The link can get
// the removed file's inode number back (it did here), so device and inode
// alone pass: the worker compares the file type too, and must refuse to
// serve, leaving nothing behind. Control: without the swap the same session
// serves the protected file read-only.
func TestSessionMountSwap(t *testing.T) {
	t.Parallel()
	mountSwap(t, "")
}

// mountSwap runs TestSessionMountSwap's attack and control under runtime.
func mountSwap(t *testing.T, runtime string) {
	ctx := context.Background()
	for _, swap := range []bool{false, true} {
		f := newFixture(t)
		f.m.Runtime = runtime
		ws := f.workspace()
		os.MkdirAll(filepath.Join(ws, ".git"), 0o777)
		os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644)
		secret := filepath.Join(f.home, ".netrc")
		os.Chmod(secret, 0o644) // readable by the session user, if it were mounted
		f.m.mutatePlan = func(p *plan) {
			if !swap {
				return
			}
			cfg := filepath.Join(ws, ".git", "config")
			if err := os.Remove(cfg); err != nil {
				t.Error(err)
			}
			if err := os.Symlink(secret, cfg); err != nil {
				t.Error(err)
			}
		}
		s, err := f.m.Create(ctx, f.spec(ws))
		if !swap {
			if err != nil {
				t.Fatalf("runtime %q, control: %v", runtime, err)
			}
			r := sh(t, s, "cat .git/config; (echo x >> .git/config) 2>/dev/null && echo WROTE")
			f.m.Discard(ctx, s.ID())
			if r.Stdout != "[core]\n" {
				t.Fatalf("runtime %q, control: %+v", runtime, r)
			}
			continue
		}
		if err == nil {
			r := sh(t, s, "cat .git/config")
			f.m.Discard(ctx, s.ID())
			t.Fatalf("runtime %q: a session with a swapped mount serves (.git/config reads %q)", runtime, r.Stdout)
		}
		if !strings.Contains(err.Error(), "was it replaced") {
			t.Fatalf("runtime %q: %v, want the worker's refusal", runtime, err)
		}
		if strings.Contains(err.Error(), "machine x password y") {
			t.Fatalf("the refusal carries the secret: %v", err)
		}
		if list, _ := f.m.List(ctx); len(list) != 0 {
			t.Fatalf("runtime %q: the refused session was left behind: %+v", runtime, list)
		}
	}
}

// The session socket lives in a directory the session can write. Whatever
// is put there in place of the worker's socket (a symlink to another
// daemon's socket, a listener of someone else's) is refused before a byte
// is sent to it.
func TestSessionSocketPeerVerified(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.create(f.spec(f.workspace()))
	rec, err := f.m.readRecord(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(rec.RunDir, socketName)
	// An impostor listener on the host that counts what it receives.
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "impostor.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(`{"event":"ready","version":1}` + "\n"))
			buf := make([]byte, 4096)
			n, _ := c.Read(buf)
			got <- n
			c.Close()
		}
	}()
	ctx := context.Background()
	if err := os.Rename(sock, sock+".real"); err != nil {
		t.Fatal(err)
	}
	// 1. A symlink to the impostor.
	os.Symlink(filepath.Join(dir, "impostor.sock"), sock)
	if _, err := f.m.Open(ctx, s.ID()); !errors.Is(err, ErrUntrustedPeer) {
		t.Fatalf("symlink: %v", err)
	}
	os.Remove(sock)
	// 2. The impostor's socket file itself in place of the worker's (a hard
	// link to the socket inode: the same listener).
	if err := os.Link(filepath.Join(dir, "impostor.sock"), sock); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Open(ctx, s.ID()); !errors.Is(err, ErrUntrustedPeer) {
		t.Fatalf("impostor listener: %v", err)
	}
	select {
	case n := <-got:
		if n > 0 {
			t.Fatalf("the impostor received %d bytes", n)
		}
	default:
	}
	// Control: the real socket back in place works.
	os.Remove(sock)
	if err := os.Rename(sock+".real", sock); err != nil {
		t.Fatal(err)
	}
	s2, err := f.m.Open(ctx, s.ID())
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	s2.Close()
}
