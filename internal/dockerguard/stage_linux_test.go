package dockerguard

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The symlink-swap race between the bind-source check and the engine's
// mount: with a stage dir, what the engine is told to mount is a bind of
// the object the guard opened beneath the workspace, so swapping the
// checked directory for a symlink afterwards changes nothing (control: the
// original path now leads to /). Escapes through symlinks are refused,
// missing Binds sources are created beneath the workspace only, and the
// staged bind is recursive (a read-only submount stays read-only).
func TestStageBind(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("staging bind mounts needs root (CAP_SYS_ADMIN), as in the sidecar")
	}
	stage := filepath.Join(t.TempDir(), "stage")
	e := setupPolicy(t, func(_ string, p *Policy) { p.StageDir = stage })
	t.Cleanup(func() {
		ents, _ := os.ReadDir(stage)
		for _, en := range ents {
			unix.Unmount(filepath.Join(stage, en.Name()), unix.MNT_DETACH)
		}
	})
	ws := e.ws
	sub := filepath.Join(ws, "sub")
	os.MkdirAll(filepath.Join(sub, "prot"), 0o755)
	os.WriteFile(filepath.Join(sub, "marker"), []byte("inside"), 0o644)
	// A read-only submount, as the session's protected paths are.
	prot := filepath.Join(sub, "prot")
	if err := unix.Mount(prot, prot, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(ws, "sub.old", "prot"), unix.MNT_DETACH) }) // renamed below
	if err := unix.Mount("", prot, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	// Direct calls use names of their own in the same stage dir.
	g := &Guard{p: Policy{Workspace: ws, StageDir: stage}, staged: new(atomic.Uint64)}
	g.staged.Store(1000)

	// Through the API: the forwarded bind names the staged path.
	_, msg, fwd := e.do(t, e.client, "POST", "/v1.41/containers/create", create(`"Binds":["`+sub+`:/x"]`))
	if fwd == nil {
		t.Fatalf("create with a workspace bind: %s", msg)
	}
	var got struct{ HostConfig struct{ Binds []string } }
	json.Unmarshal(fwd.Body, &got)
	if len(got.HostConfig.Binds) == 0 || !strings.HasPrefix(got.HostConfig.Binds[0], stage+"/") {
		t.Fatalf("forwarded binds %v, want a source under %s", got.HostConfig.Binds, stage)
	}
	staged := strings.Split(got.HostConfig.Binds[0], ":")[0]

	// The race: swap the checked directory for a symlink to /.
	if err := os.Rename(sub, filepath.Join(ws, "sub.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", sub); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sub, "proc", "self")); err != nil {
		t.Fatalf("control: the swapped path does not lead to /: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(staged, "marker")); err != nil || string(b) != "inside" {
		t.Errorf("the staged bind does not hold the checked directory after the swap: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(staged, "proc")); err == nil {
		t.Errorf("the staged bind leads to / after the swap")
	}
	// Recursive: the read-only submount stays read-only in the stage
	// (control: the checked directory itself is writable).
	if err := os.WriteFile(filepath.Join(staged, "prot", "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write under the read-only submount through the stage: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(staged, "w"), nil, 0o644); err != nil {
		t.Errorf("control: write in the staged directory: %v", err)
	}

	var rnd [6]byte
	rand.Read(rnd[:])
	outside := "/tmp/vaktest-stage-" + hex.EncodeToString(rnd[:])
	os.Symlink("../..", filepath.Join(ws, "up"))
	os.Symlink("sub.old", filepath.Join(ws, "in"))
	for _, tc := range []struct {
		src    string
		create bool
		deny   string // "" = allowed
	}{
		{sub, true, "through a symlink"},                                                  // now a symlink to /
		{filepath.Join(ws, "up"), true, "through a symlink"},                              // relative, leads above
		{filepath.Join(sub, strings.TrimPrefix(outside, "/")), true, "through a symlink"}, // must not create outside
		{filepath.Join(ws, "in"), false, ""},                                              // a symlink within: fine
		{filepath.Join(ws, "new", "dir"), true, ""},                                       // created beneath
		{filepath.Join(ws, "missing"), false, "does not exist"},                           // Mounts: not created
	} {
		p, err := g.stageBind(tc.src, tc.create, "HostConfig.Binds")
		var d *Denied
		switch {
		case tc.deny == "" && err != nil:
			t.Errorf("%s: %v", tc.src, err)
		case tc.deny != "" && (!errors.As(err, &d) || !strings.Contains(err.Error(), tc.deny) || !strings.Contains(err.Error(), "HostConfig.Binds")):
			t.Errorf("%s: %v (%s), want a denial %q", tc.src, err, p, tc.deny)
		}
	}
	// A file source is staged as a file.
	os.WriteFile(filepath.Join(ws, "conf.json"), []byte("{}"), 0o644)
	if p, err := g.stageBind(filepath.Join(ws, "conf.json"), true, "HostConfig.Binds"); err != nil {
		t.Errorf("a file source: %v", err)
	} else if b, err := os.ReadFile(p); err != nil || string(b) != "{}" {
		t.Errorf("the staged file source reads %q, %v", b, err)
	}
	if _, err := os.Stat(outside); err == nil {
		os.RemoveAll(outside)
		t.Errorf("staging created %s outside the workspace", outside)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "new", "dir")); err != nil || !fi.IsDir() {
		t.Errorf("a missing Binds source was not created in the workspace: %v", err)
	}
}
