package fsguard

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireWatchAgrees fails the test unless the Watch's Scan is the Scan a
// full walk gives now (the walk is the positive control: it sees every
// change, so a change the Watch missed shows as a difference).
func requireWatchAgrees(t *testing.T, w *Watch, tree *Tree, step string) {
	t.Helper()
	requireWatchAgreesOrWalks(t, w, tree, step, false)
}

// requireWatchAgreesOrWalks is requireWatchAgrees where the Watch may have
// given up (mayWalk): its Scan must still be right.
func requireWatchAgreesOrWalks(t *testing.T, w *Watch, tree *Tree, step string, mayWalk bool) {
	t.Helper()
	want, err := tree.Scan(true)
	if err != nil {
		t.Fatal(err)
	}
	got, err := w.Scan(tree, true)
	if err != nil {
		t.Fatal(err)
	}
	if w.Err() != nil && !mayWalk {
		t.Fatalf("%s: the watch gave up: %v", step, w.Err())
	}
	requireScanIsWalks(t, "watch", got, want, tree, step)
}

// requireScanIsWalks fails the test unless got (what's Scan) is want
// (the walk's) in every field the tripwire reads: the .git entries, the
// setuid files, truncation, and Lacks for names in the workspace
// directory and for a few that are not.
func requireScanIsWalks(t *testing.T, what string, got, want Scan, tree *Tree, step string) {
	t.Helper()
	slices.Sort(want.Setuid)
	slices.Sort(got.Setuid)
	if !maps.Equal(got.Git, want.Git) || !slices.Equal(got.Setuid, want.Setuid) || got.Truncated != want.Truncated {
		t.Fatalf("%s: %s and walk differ:\n%s git %v setuid %q\nwalk git %v setuid %q", step, what, what, got.GitNames(), got.Setuid, want.GitNames(), want.Setuid)
	}
	names := []string{".git", ".GIT", ".vscode", "a", "b", "A", "zz"}
	if ents, err := os.ReadDir(tree.Path()); err == nil {
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	for _, n := range names {
		if got.Lacks(n) != want.Lacks(n) {
			t.Fatalf("%s: Lacks(%q): %s %v, walk %v", step, n, what, got.Lacks(n), want.Lacks(n))
		}
	}
}

// The Watch against the full walk over random changes of every kind the
// tripwire must see: new directories with .git entries made in one go
// (before any pass could watch them), renames of directories holding .git
// entries, .git renamed to a plain name and back, directories moved out of
// the workspace and in from outside, RENAME_EXCHANGE, symbolic links in
// place of directories, hard links, and setuid and setgid bits set by
// chmod and by creation. A Watch from NewChangeWatch, whose first build
// stats no file, gives the same answers here: the workspace starts empty,
// so every file it holds was made after that build.
func TestWatchAgreesWithWalk(t *testing.T) {
	for seed := range uint64(12) {
		newWatch := NewWatch
		if seed%2 == 1 {
			newWatch = NewChangeWatch
		}
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			hw := newHostWorld(t)
			out, r := filepath.Join(hw.other, "moved"), rand.New(rand.NewPCG(seed, 7))
			os.MkdirAll(out, 0o755)
			pick := func() string { return randomRel(r) }
			w := newWatch(hw.ws)
			defer w.Close()
			requireWatchAgrees(t, w, hw.tree, "empty")
			var log []string
			for i := range 300 {
				p, q := pick(), pick()
				op := watchOps[r.IntN(len(watchOps))]
				randomChange(hw, out, r, op, p, q)
				log = append(log, fmt.Sprintf("%s %q %q", op, p, q))
				if r.IntN(3) == 0 {
					requireWatchAgrees(t, w, hw.tree, fmt.Sprintf("after step %d (last ops: %s)", i, strings.Join(log[max(0, len(log)-6):], "; ")))
				}
			}
			requireWatchAgrees(t, w, hw.tree, "at the end")
			t.Logf("%d rebuilds", w.Rebuilds())
		})
	}
}

// randomRel is a workspace-relative path of one to four segments drawn
// from names that matter to the tripwire and names that do not.
func randomRel(r *rand.Rand) string {
	names := []string{"a", "b", "c", ".git", ".GIT", "x.git", "a b"}
	segs := make([]string, 1+r.IntN(4))
	for i := range segs {
		segs[i] = names[r.IntN(len(names))]
	}
	return filepath.Join(segs...)
}

// watchOps are the changes TestWatchAgreesWithWalk draws from
// (randomChange), mkdir twice as often as the others.
var watchOps = []string{"mkdir", "mkdir", "write", "chmod setuid", "chmod setgid", "chmod plain", "rename", "exchange", "remove", "symlink", "link", "move out", "move in", "create setuid"}

// randomChange makes the change op in hw's workspace with the random
// workspace-relative paths p and q (out is a directory outside the
// workspace to move directories to and from).
func randomChange(hw *hostWorld, out string, r *rand.Rand, op, p, q string) {
	abs := func(rel string) string { return filepath.Join(hw.ws, rel) }
	switch op {
	case "mkdir":
		os.MkdirAll(abs(p), 0o755)
	case "write":
		os.MkdirAll(filepath.Dir(abs(p)), 0o755)
		os.WriteFile(abs(p), []byte("x"), 0o644)
	case "chmod setuid":
		chmodFile(abs(p), os.ModeSetuid|0o755)
	case "chmod setgid":
		chmodFile(abs(p), os.ModeSetgid|0o644)
	case "chmod plain":
		chmodFile(abs(p), 0o644)
	case "rename":
		os.Rename(abs(p), abs(q))
	case "exchange":
		unix.Renameat2(unix.AT_FDCWD, abs(p), unix.AT_FDCWD, abs(q), unix.RENAME_EXCHANGE)
	case "remove":
		os.RemoveAll(abs(p))
	case "symlink":
		// Links lead nowhere outside the test's directory: the
		// operations here follow them.
		os.Symlink([]string{"..", hw.other, "a"}[r.IntN(3)], abs(p))
	case "link":
		os.Link(abs(p), abs(q))
	case "move out":
		// Out of the workspace, and later back in elsewhere.
		os.RemoveAll(filepath.Join(out, "d"))
		os.Rename(abs(p), filepath.Join(out, "d"))
	case "move in":
		os.MkdirAll(filepath.Join(out, "d", "n", ".git"), 0o755)
		os.Rename(filepath.Join(out, "d"), abs(q))
	case "create setuid":
		os.MkdirAll(filepath.Dir(abs(p)), 0o755)
		if fd, err := unix.Open(abs(p), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755); err == nil {
			unix.Close(fd)
		}
	case "hide":
		// A new directory, and its parent's times put back.
		d := filepath.Dir(abs(p))
		var st unix.Stat_t
		if unix.Lstat(d, &st) == nil {
			os.Mkdir(abs(p), 0o755)
			unix.UtimesNanoAt(unix.AT_FDCWD, d, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
		}
	default:
		panic("randomChange: no change " + op)
	}
}

// An overflowing event queue (more changes than
// fs.inotify.max_queued_events between two passes) makes the next Scan
// walk again; a .git planted among the flood is found.
func TestWatchOverflowRebuilds(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip(err)
	}
	max, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if max <= 0 || max > 100_000 {
		t.Skipf("max_queued_events %d: too many to overflow here", max)
	}
	hw := newHostWorld(t)
	w := NewWatch(hw.ws)
	defer w.Close()
	requireWatchAgrees(t, w, hw.tree, "empty")
	dir := filepath.Join(hw.ws, "flood")
	os.Mkdir(dir, 0o755)
	requireWatchAgrees(t, w, hw.tree, "flood dir")
	for i := range max + 100 {
		fd, err := unix.Open(filepath.Join(dir, strconv.Itoa(i)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
	}
	os.MkdirAll(filepath.Join(dir, "deep", "er", ".git"), 0o755)
	requireWatchAgrees(t, w, hw.tree, "after the flood")
	if w.Rebuilds() != 1 {
		t.Fatalf("rebuilds %d after an overflow, want 1", w.Rebuilds())
	}
	if _, err := w.Scan(hw.tree, true); err != nil || w.Rebuilds() != 1 {
		t.Fatalf("a quiet pass rebuilt again: %d, %v", w.Rebuilds(), err)
	}
}

// A tree with more directories than the Watch may watch makes it give up:
// every Scan is then a full walk, and still right.
func TestWatchGivesUpOverLimit(t *testing.T) {
	hw := newHostWorld(t)
	for i := range 6 {
		os.MkdirAll(filepath.Join(hw.ws, strconv.Itoa(i)), 0o755)
	}
	w := NewWatch(hw.ws)
	w.limit = 4
	defer w.Close()
	sc, err := w.Scan(hw.tree, true)
	if err != nil || w.Err() == nil || !strings.Contains(w.Err().Error(), "more than 4 directories") {
		t.Fatalf("Scan over the limit: %v; Err %v", err, w.Err())
	}
	os.MkdirAll(filepath.Join(hw.ws, "3", "n", ".git"), 0o755)
	if sc, err = w.Scan(hw.tree, true); err != nil || sc.Git["3/n/.git"].Kind != Dir {
		t.Fatalf("walk after giving up missed 3/n/.git: %v %v", sc.GitNames(), err)
	}
}

// The workspace directory renamed away and a new one made at its path:
// the Watch rebuilds on the new directory.
func TestWatchWorkspaceReplaced(t *testing.T) {
	hw := newHostWorld(t)
	w := NewWatch(hw.ws)
	defer w.Close()
	requireWatchAgrees(t, w, hw.tree, "empty")
	if err := os.Rename(hw.ws, hw.ws+".old"); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(hw.ws, "r", ".git"), 0o755)
	tree, err := OpenTree(hw.ws)
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	requireWatchAgrees(t, w, tree, "new workspace")
	if w.Rebuilds() != 1 {
		t.Fatalf("rebuilds %d, want 1", w.Rebuilds())
	}
}

// Two paths to one directory (a bind mount inside the workspace): one
// watch cannot tell them apart, so the Watch gives up and walks.
func TestWatchGivesUpOnBindMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind mount")
	}
	hw := newHostWorld(t)
	os.MkdirAll(filepath.Join(hw.ws, "a"), 0o755)
	os.MkdirAll(filepath.Join(hw.ws, "b"), 0o755)
	if err := unix.Mount(filepath.Join(hw.ws, "a"), filepath.Join(hw.ws, "b"), "", unix.MS_BIND, ""); err != nil {
		t.Skip(err)
	}
	defer unix.Unmount(filepath.Join(hw.ws, "b"), unix.MNT_DETACH)
	w := NewWatch(hw.ws)
	defer w.Close()
	if _, err := w.Scan(hw.tree, true); err != nil || w.Err() == nil || !strings.Contains(w.Err().Error(), "are one directory") {
		t.Fatalf("bind mount: %v; Err %v", err, w.Err())
	}
	os.Mkdir(filepath.Join(hw.ws, "a", ".git"), 0o755)
	sc, err := w.Scan(hw.tree, true)
	if err != nil || sc.Git["a/.git"].Kind != Dir || sc.Git["b/.git"].Kind != Dir {
		t.Fatalf("walk after giving up: %v %v", sc.GitNames(), err)
	}
}

// A nil Watch is a full walk.
func TestWatchNil(t *testing.T) {
	hw := newHostWorld(t)
	os.MkdirAll(filepath.Join(hw.ws, "q", ".git"), 0o755)
	var w *Watch
	sc, err := w.Scan(hw.tree, false)
	if err != nil || sc.Git["q/.git"].Kind != Dir || w.Err() == nil || w.Close() != nil {
		t.Fatalf("nil watch: %v %v", sc.GitNames(), err)
	}
}

// Ways to give a file the setuid bit that raise no event for any name the
// Watch records: through a second hard link inside .git (which Tree.Scan
// never enters), through a descriptor whose name is gone, through a second
// name when both existed before the Watch started, and behind a directory
// the Watch cannot open. Each ends with the file found, as the full walk
// (the positive control) finds it; only the last makes the Watch give up.
func TestWatchSetuidThroughOtherNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		before  func(t *testing.T, ws string)
		do      func(t *testing.T, ws string)
		givesUp bool
	}{
		{"hard link inside .git", nil, func(t *testing.T, ws string) {
			must(t, os.Link(filepath.Join(ws, "x"), filepath.Join(ws, ".git", "y")))
			must(t, os.Chmod(filepath.Join(ws, ".git", "y"), os.ModeSetuid|0o755))
		}, false},
		{"fchmod after unlink of a second name", nil, func(t *testing.T, ws string) {
			must(t, os.Link(filepath.Join(ws, "x"), filepath.Join(ws, "d", "y")))
			f, err := os.Open(filepath.Join(ws, "d", "y"))
			must(t, err)
			defer f.Close()
			must(t, os.Remove(filepath.Join(ws, "d", "y")))
			must(t, f.Chmod(os.ModeSetuid|0o755))
		}, false},
		{"a second name from before", func(t *testing.T, ws string) {
			must(t, os.Link(filepath.Join(ws, "x"), filepath.Join(ws, ".git", "y")))
		}, func(t *testing.T, ws string) {
			must(t, os.Chmod(filepath.Join(ws, ".git", "y"), os.ModeSetgid|0o755))
		}, false},
		{"a directory it cannot open", nil, func(t *testing.T, ws string) {
			if os.Geteuid() == 0 {
				t.Skip("root opens any directory")
			}
			must(t, os.Chmod(filepath.Join(ws, "d"), 0o300)) // write and search, no read
			t.Cleanup(func() { os.Chmod(filepath.Join(ws, "d"), 0o755) })
			must(t, os.Link(filepath.Join(ws, "x"), filepath.Join(ws, "d", "y")))
			must(t, os.Chmod(filepath.Join(ws, "d", "y"), os.ModeSetuid|0o755))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hw := newHostWorld(t)
			os.MkdirAll(filepath.Join(hw.ws, ".git"), 0o755)
			os.MkdirAll(filepath.Join(hw.ws, "d"), 0o755)
			writeFile(t, filepath.Join(hw.ws, "x"), "#!/bin/sh\n")
			if tc.before != nil {
				tc.before(t, hw.ws)
			}
			w := NewWatch(hw.ws)
			defer w.Close()
			requireWatchAgrees(t, w, hw.tree, "before")
			tc.do(t, hw.ws)
			requireWatchAgreesOrWalks(t, w, hw.tree, "after", tc.givesUp)
			sc, err := w.Scan(hw.tree, true)
			if err != nil || !slices.Contains(sc.Setuid, "x") {
				t.Fatalf("setuid x not found: %q %v (watch: %v)", sc.Setuid, err, w.Err())
			}
			if (w.Err() != nil) != tc.givesUp {
				t.Fatalf("gave up: %v, want %v", w.Err(), tc.givesUp)
			}
		})
	}
}

// A Watch from NewChangeWatch reports the setuid or setgid bit of a file
// that had it before its first build only once it walks again with stats;
// it reports every file that gains a bit after that build, made with it,
// renamed in or changed through a name in the workspace, without walking.
// A setuid file with a second name makes it walk again (its other names
// may be ones it never saw), here one linked in from outside: the walk
// then reports the file from before. The controls: NewWatch, and the full
// walk, report the file from before at once.
func TestChangeWatchSetuidAfterItsBuild(t *testing.T) {
	hw := newHostWorld(t)
	ws := hw.ws
	os.MkdirAll(filepath.Join(ws, "d"), 0o755)
	writeFile(t, filepath.Join(ws, "old"), "#!/bin/sh\n")
	must(t, os.Chmod(filepath.Join(ws, "old"), os.ModeSetuid|0o755))
	writeFile(t, filepath.Join(ws, "x"), "#!/bin/sh\n")
	writeFile(t, filepath.Join(ws, "y"), "#!/bin/sh\n")
	must(t, os.Link(filepath.Join(ws, "x"), filepath.Join(ws, "d", "x2"))) // linked before the build
	full := NewWatch(ws)
	defer full.Close()
	requireWatchAgrees(t, full, hw.tree, "control")
	w := NewChangeWatch(ws)
	defer w.Close()
	setuidOf := func(step string) []string {
		t.Helper()
		sc, err := w.Scan(hw.tree, true)
		if err != nil || w.Err() != nil {
			t.Fatalf("%s: %v (watch: %v)", step, err, w.Err())
		}
		slices.Sort(sc.Setuid)
		return sc.Setuid
	}
	if got := setuidOf("build"); len(got) != 0 {
		t.Fatalf("the build stat'ed files: setuid %q", got)
	}
	for _, step := range []struct {
		do   func()
		want string
	}{
		{func() {
			fd, err := unix.Open(filepath.Join(ws, "d", "created"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
			must(t, err)
			unix.Close(fd)
		}, "d/created"},
		{func() {
			must(t, os.MkdirAll(filepath.Join(hw.other, "dir", "sub"), 0o755))
			writeFile(t, filepath.Join(hw.other, "dir", "sub", "f"), "x")
			must(t, os.Chmod(filepath.Join(hw.other, "dir", "sub", "f"), os.ModeSetuid|0o755))
			must(t, os.Rename(filepath.Join(hw.other, "dir"), filepath.Join(ws, "d", "moved")))
		}, "d/moved/sub/f"},
		{func() { must(t, os.Chmod(filepath.Join(ws, "y"), os.ModeSetgid|0o755)) }, "y"},
		{func() { must(t, os.Chmod(filepath.Join(ws, "d", "x2"), 0o700)) }, ""},
	} {
		step.do()
		got := setuidOf(step.want)
		if (step.want != "" && !slices.Contains(got, step.want)) || slices.Contains(got, "old") {
			t.Fatalf("after making %q: setuid %q", step.want, got)
		}
	}
	if w.Rebuilds() != 0 {
		t.Fatalf("the watch walked again (%d) before the last step", w.Rebuilds())
	}
	outside := filepath.Join(hw.other, "made-outside")
	writeFile(t, outside, "x")
	must(t, os.Chmod(outside, os.ModeSetgid|0o755))
	must(t, os.Link(outside, filepath.Join(ws, "linked-in")))
	if got := setuidOf("linked in"); !slices.Contains(got, "linked-in") || !slices.Contains(got, "old") || w.Rebuilds() != 1 {
		t.Fatalf("after a setuid file linked in: setuid %q, rebuilds %d", got, w.Rebuilds())
	}
	requireWatchAgrees(t, w, hw.tree, "after the walk")
}

// Files with hard links are watched themselves, within the Watch's share
// of the user's watches: past it, the Watch gives up.
func TestWatchLinkedFilesCount(t *testing.T) {
	hw := newHostWorld(t)
	for i := range 3 {
		f := filepath.Join(hw.ws, fmt.Sprint("f", i))
		writeFile(t, f, "x")
		must(t, os.Link(f, f+".link"))
	}
	w := NewWatch(hw.ws)
	defer w.Close()
	requireWatchAgrees(t, w, hw.tree, "three linked files")
	w2 := NewWatch(hw.ws)
	w2.limit = 3 // the workspace and two linked files
	defer w2.Close()
	requireWatchAgreesOrWalks(t, w2, hw.tree, "over the limit", true)
	if w2.Err() == nil || !strings.Contains(w2.Err().Error(), "linked files") {
		t.Fatalf("Err %v, want the limit", w2.Err())
	}
}

// chmodFile changes the mode of p if it is a regular file (never through
// a final link, never a directory the test's clean-up must enter).
func chmodFile(p string, mode os.FileMode) {
	if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
		os.Chmod(p, mode)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// chmod, then rename into place (how many tools install a file): the file
// is looked at under its new name, without a walk.
func TestWatchChmodThenRename(t *testing.T) {
	hw := newHostWorld(t)
	os.MkdirAll(filepath.Join(hw.ws, "bin"), 0o755)
	w := NewWatch(hw.ws)
	defer w.Close()
	requireWatchAgrees(t, w, hw.tree, "before")
	writeFile(t, filepath.Join(hw.ws, ".tmp1"), "#!/bin/sh\n")
	must(t, os.Chmod(filepath.Join(hw.ws, ".tmp1"), os.ModeSetuid|0o755))
	must(t, os.Rename(filepath.Join(hw.ws, ".tmp1"), filepath.Join(hw.ws, "bin", "tool")))
	requireWatchAgrees(t, w, hw.tree, "after")
	if sc, _ := w.Scan(hw.tree, true); !slices.Equal(sc.Setuid, []string{"bin/tool"}) || w.Rebuilds() != 0 {
		t.Fatalf("setuid %q, rebuilds %d", sc.Setuid, w.Rebuilds())
	}
}

// Only file systems that change through this kernel alone are watched.
func TestWatchLocalFS(t *testing.T) {
	for magic, want := range map[int64]bool{
		unix.EXT4_SUPER_MAGIC: true, unix.XFS_SUPER_MAGIC: true, unix.BTRFS_SUPER_MAGIC: true,
		unix.TMPFS_MAGIC: true, unix.OVERLAYFS_SUPER_MAGIC: true, 0x2fc12fc1: true,
		unix.FUSE_SUPER_MAGIC: false, unix.V9FS_MAGIC: false, unix.NFS_SUPER_MAGIC: false,
		unix.CIFS_SUPER_MAGIC: false, unix.SMB2_SUPER_MAGIC: false, unix.CEPH_SUPER_MAGIC: false,
		unix.PROC_SUPER_MAGIC: false,
	} {
		if localFS(magic) != want {
			t.Errorf("localFS(%#x) = %v, want %v", magic, !want, want)
		}
	}
}

// CheckWatch accepts a workspace on a local file system (the control) and
// names the file system of one that can change behind its back.
func TestCheckWatch(t *testing.T) {
	if err := CheckWatch(t.TempDir()); err != nil {
		t.Fatalf("a temp dir: %v", err)
	}
	if err := CheckWatch("/proc"); err == nil || !strings.Contains(err.Error(), "file system (type 0x9fa0)") {
		t.Fatalf("/proc: %v", err)
	}
	if WatchLimit() < 1 || WatchLimit() > maxWatches {
		t.Fatalf("WatchLimit %d", WatchLimit())
	}
}

// Watch.Wait wakes when the kernel reports a change in the workspace (a
// directory made in a subdirectory the first Scan watched), when its ctx
// ends, and otherwise not before its timeout; with no model yet it waits
// for the timeout or the ctx only. The positive control for "reports
// nothing" is the wake on the change made the same way.
func TestWatchWait(t *testing.T) {
	hw := newHostWorld(t)
	os.MkdirAll(filepath.Join(hw.ws, "sub"), 0o755)
	w := NewWatch(hw.ws)
	defer w.Close()
	if w.Wait(context.Background(), 10*time.Millisecond) {
		t.Fatal("a watch without a model reported events")
	}
	if _, err := w.Scan(hw.tree, true); err != nil {
		t.Fatal(err)
	}
	if w.Wait(context.Background(), 50*time.Millisecond) {
		t.Fatal("events reported with nothing changed")
	}
	done := make(chan bool, 1)
	go func() { done <- w.Wait(context.Background(), time.Minute) }()
	if err := os.Mkdir(filepath.Join(hw.ws, "sub", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !<-done {
		t.Fatal("a change in the workspace did not end the wait")
	}
	if sc, err := w.Scan(hw.tree, true); err != nil || !slices.Contains(sc.GitNames(), "sub/.git") {
		t.Fatalf("the scan after the wait: %v %v", sc.GitNames(), err)
	}
	// Nothing pending after the Scan drained the queue; a cancelled ctx
	// ends a wait of a minute.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- w.Wait(ctx, time.Minute) }()
	cancel()
	if <-done {
		t.Fatal("a cancelled wait reported events")
	}
	if w.Wait(context.Background(), 10*time.Millisecond) {
		t.Fatal("events reported after the scan drained them")
	}
}
