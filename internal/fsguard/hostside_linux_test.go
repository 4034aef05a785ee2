package fsguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// hostWorld is a workspace next to a fake home holding a canary (like
// ~/.kube/config) and a sibling project whose .git holds hooks.
type hostWorld struct {
	ws, home, canary, other string
	tree                    *Tree
}

func newHostWorld(t *testing.T) *hostWorld {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := &hostWorld{ws: filepath.Join(base, "ws"), home: filepath.Join(base, "home"), other: filepath.Join(base, "other")}
	w.canary = filepath.Join(w.home, ".kube", "config")
	for _, d := range []string{w.ws, filepath.Join(w.home, ".kube", "hooks"), filepath.Join(w.other, ".git", "hooks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, w.canary, "CANARY kube config\n")
	writeFile(t, filepath.Join(w.home, ".kube", "hooks", "h"), "CANARY\n")
	writeFile(t, filepath.Join(w.other, ".git", "config"), "[core]\n")
	writeFile(t, filepath.Join(w.other, ".git", "hooks", "pre-commit"), "CANARY hook\n")
	if w.tree, err = OpenTree(w.ws); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.tree.Close() })
	return w
}

// outsideIntact fails the test if anything outside the workspace changed.
func (w *hostWorld) outsideIntact(t *testing.T) {
	t.Helper()
	for _, p := range []string{w.canary, filepath.Join(w.home, ".kube", "hooks", "h"), filepath.Join(w.other, ".git", "config"), filepath.Join(w.other, ".git", "hooks", "pre-commit")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("host-side cleanup removed %s outside the workspace: %v", p, err)
		}
	}
}

// Links planted at every component of a protected path never lead the
// host-side operations out: Stat reports the link, Remove of the path
// refuses (ErrSymlink) and Remove of the link removes only the link.
func TestTreeLinksNeverFollowed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(w *hostWorld) error
		rel   string // the protected path the tripwire looks at
		kind  Kind
		via   string
	}{
		{"dot-git to home dir", func(w *hostWorld) error {
			return os.Symlink(filepath.Join(w.home, ".kube"), filepath.Join(w.ws, ".git"))
		}, ".git/config", ViaLink, ".git"},
		{"dot-git to other project", func(w *hostWorld) error { return os.Symlink("../other/.git", filepath.Join(w.ws, ".git")) }, ".git/hooks", ViaLink, ".git"},
		{"hooks link", func(w *hostWorld) error {
			os.Mkdir(filepath.Join(w.ws, ".git"), 0o755)
			return os.Symlink(filepath.Join(w.other, ".git", "hooks"), filepath.Join(w.ws, ".git", "hooks"))
		}, ".git/hooks", Link, ".git/hooks"},
		{"config file link", func(w *hostWorld) error {
			os.Mkdir(filepath.Join(w.ws, ".git"), 0o755)
			return os.Symlink(w.canary, filepath.Join(w.ws, ".git", "config"))
		}, ".git/config", Link, ".git/config"},
		{"deep component", func(w *hostWorld) error {
			os.MkdirAll(filepath.Join(w.ws, ".config"), 0o755)
			return os.Symlink(filepath.Join(w.home, ".kube"), filepath.Join(w.ws, ".config", "mise"))
		}, ".config/mise/config.toml", ViaLink, ".config/mise"},
		{"top component", func(w *hostWorld) error { return os.Symlink(w.home, filepath.Join(w.ws, ".config")) }, ".config/mise", ViaLink, ".config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newHostWorld(t)
			if err := tc.plant(w); err != nil {
				t.Fatal(err)
			}
			// Control: following the path (as os.RemoveAll would) reaches
			// the outside, so the attack is real.
			if _, err := os.Stat(filepath.Join(w.ws, tc.rel)); err != nil && tc.name != "deep component" && tc.name != "top component" {
				t.Fatalf("control: %s does not reach outside: %v", tc.rel, err)
			}
			e, err := w.tree.Stat(tc.rel)
			if err != nil {
				t.Fatal(err)
			}
			if e.Kind != tc.kind || e.Via != tc.via {
				t.Fatalf("Stat(%s) = %v via %q, want %v via %q", tc.rel, e.Kind, e.Via, tc.kind, tc.via)
			}
			if tc.kind == ViaLink {
				if err := w.tree.Remove(tc.rel); !errors.Is(err, ErrSymlink) {
					t.Errorf("Remove(%s) through a link = %v, want ErrSymlink", tc.rel, err)
				}
			}
			if err := w.tree.Remove(e.Via); err != nil {
				t.Fatalf("Remove(%s): %v", e.Via, err)
			}
			if _, err := os.Lstat(filepath.Join(w.ws, e.Via)); !os.IsNotExist(err) {
				t.Errorf("the link %s is still there: %v", e.Via, err)
			}
			w.outsideIntact(t)
		})
	}
}

// Remove of a real directory removes it with everything below, but a link
// inside it is removed as a link (its target survives). Positive control
// for the tests above: the same cleanup does remove in-workspace content.
func TestTreeRemoveRecursiveStaysInside(t *testing.T) {
	w := newHostWorld(t)
	git := filepath.Join(w.ws, ".git")
	os.MkdirAll(filepath.Join(git, "hooks", "deep"), 0o755)
	writeFile(t, filepath.Join(git, "config"), "[core]\n\tfsmonitor = evil\n")
	writeFile(t, filepath.Join(git, "hooks", "deep", "pre-commit"), "evil\n")
	os.Symlink(filepath.Join(w.home, ".kube"), filepath.Join(git, "hooks", "kube"))
	os.Symlink(w.canary, filepath.Join(git, "hooks", "deep", "cfg"))
	os.Symlink(filepath.Join(w.other, ".git"), filepath.Join(git, "modules"))
	if err := w.tree.Remove(".git"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(git); !os.IsNotExist(err) {
		t.Fatalf(".git survived: %v", err)
	}
	w.outsideIntact(t)
	// Missing is not an error; invalid paths are.
	if err := w.tree.Remove(".git"); err != nil {
		t.Errorf("removing a missing path: %v", err)
	}
	for _, bad := range []string{"", "/etc", "..", "../x", "a/../../x"} {
		if err := w.tree.Remove(bad); err == nil {
			t.Errorf("Remove(%q) accepted", bad)
		}
	}
}

// Scan finds .git entries of every kind at any depth (without entering
// them or following links) and setuid/setgid files; ClearSetuid clears
// the bits without following a link.
func TestTreeScanAndClearSetuid(t *testing.T) {
	w := newHostWorld(t)
	os.MkdirAll(filepath.Join(w.ws, ".git", "sub", ".git"), 0o755) // inside .git: not a repository of the tree
	os.MkdirAll(filepath.Join(w.ws, "a", "b", ".git"), 0o755)
	os.MkdirAll(filepath.Join(w.ws, "mod"), 0o755)
	writeFile(t, filepath.Join(w.ws, "mod", ".git"), "gitdir: ../.git/modules/mod\n")
	os.MkdirAll(filepath.Join(w.ws, "lnk"), 0o755)
	os.Symlink("../other/.git", filepath.Join(w.ws, "lnk", ".git"))
	os.Symlink(w.other, filepath.Join(w.ws, "other-link")) // never entered: other/.git is not found
	os.MkdirAll(filepath.Join(w.ws, "Up"), 0o755)
	os.Mkdir(filepath.Join(w.ws, "Up", ".GIT"), 0o755)
	suid := filepath.Join(w.ws, "a", "sh")
	writeFile(t, suid, "#!/bin/sh\n")
	os.Chmod(suid, os.ModeSetuid|0o755)
	sgid := filepath.Join(w.ws, "sgid")
	writeFile(t, sgid, "x")
	os.Chmod(sgid, os.ModeSetgid|0o750)
	outsideSuid := filepath.Join(w.home, "suid")
	writeFile(t, outsideSuid, "x")
	os.Chmod(outsideSuid, os.ModeSetuid|0o755)
	os.Symlink(outsideSuid, filepath.Join(w.ws, "suid-link"))

	sc, err := w.tree.Scan(true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Kind{".git": Dir, "a/b/.git": Dir, "mod/.git": File, "lnk/.git": Link, "Up/.GIT": Dir}
	if len(sc.Git) != len(want) {
		t.Errorf("Scan found %v, want %v", sc.GitNames(), want)
	}
	for rel, k := range want {
		if sc.Git[rel].Kind != k {
			t.Errorf("Scan: %s = %v, want %v", rel, sc.Git[rel].Kind, k)
		}
	}
	if got := sc.GitRoots(); !slices.Equal(got, []string{"", "Up", "a/b", "lnk", "mod"}) {
		t.Errorf("GitRoots = %q", got)
	}
	slices.Sort(sc.Setuid)
	if !slices.Equal(sc.Setuid, []string{"a/sh", "sgid"}) {
		t.Errorf("Setuid = %q, want a/sh and sgid", sc.Setuid)
	}
	for _, rel := range sc.Setuid {
		if _, err := w.tree.ClearSetuid(rel); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]os.FileMode{suid: 0o755, sgid: 0o750} {
		fi, _ := os.Stat(p)
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != want {
			t.Errorf("%s mode %v after ClearSetuid, want %v", p, fi.Mode(), want)
		}
	}
	if _, err := w.tree.ClearSetuid("suid-link"); err == nil {
		t.Error("ClearSetuid followed a link")
	}
	if fi, _ := os.Stat(outsideSuid); fi.Mode()&os.ModeSetuid == 0 {
		t.Error("the setuid file outside the workspace was changed through a link")
	}
}

// Plan pins .git directories and the parents of existing protected paths,
// mounts existing protected paths and gitdir files read-only, repeats the
// .git entries for nested repositories, and mounts nothing reached through
// a link.
func TestTreePlan(t *testing.T) {
	w := newHostWorld(t)
	for _, d := range []string{".git/hooks", "sub/.git/hooks", ".config/mise", ".vscode"} {
		os.MkdirAll(filepath.Join(w.ws, d), 0o755)
	}
	writeFile(t, filepath.Join(w.ws, ".git", "config"), "[core]\n")
	writeFile(t, filepath.Join(w.ws, "sub", ".git", "config"), "[core]\n")
	os.MkdirAll(filepath.Join(w.ws, "m"), 0o755)
	writeFile(t, filepath.Join(w.ws, "m", ".git"), "gitdir: ../.git/modules/m\n")
	os.Symlink(filepath.Join(w.home, ".kube"), filepath.Join(w.ws, ".idea"))
	pl, err := w.tree.Plan([]string{".git/hooks", ".git/config", ".vscode", ".config/mise", ".idea/workspace.xml", ".envrc"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{".config", ".git", "m", "sub", "sub/.git"}; !slices.Equal(pl.Pin, want) {
		t.Errorf("Pin = %q, want %q", pl.Pin, want)
	}
	if want := []string{".vscode", ".config/mise", ".git/config", ".git/hooks", "m/.git", "sub/.git/config", "sub/.git/hooks"}; !slices.Equal(pl.ReadOnly, want) {
		t.Errorf("ReadOnly = %q, want %q", pl.ReadOnly, want)
	}
	if !slices.Contains(pl.Protected, "sub/.git/hooks") || !slices.Contains(pl.Protected, "m/.git/config") || slices.Contains(pl.Protected, "sub/.vscode") {
		t.Errorf("Protected = %q", pl.Protected)
	}
	for _, p := range append(pl.Pin, pl.ReadOnly...) {
		if strings.HasPrefix(p, ".idea") {
			t.Errorf("plan mounts %s, reached through a link", p)
		}
	}
}

// Remove empties directories that a tool left read-only (Go's module cache
// makes its directories 0555) or unreadable (mode 0), fixing their modes
// through descriptors only: a link in the tree to a read-only host
// directory leaves that directory's mode and contents alone. (As root the
// modes do not stop anything; the non-root leg exercises them.)
func TestTreeRemoveReadOnlyDirs(t *testing.T) {
	w := newHostWorld(t)
	hostRO := filepath.Join(w.home, "ro")
	os.MkdirAll(hostRO, 0o755)
	writeFile(t, filepath.Join(hostRO, "keep"), "CANARY\n")
	os.Chmod(hostRO, 0o555)
	t.Cleanup(func() { os.Chmod(hostRO, 0o755) })
	mod := filepath.Join(w.ws, "cache", "mod", "example.com@v1")
	os.MkdirAll(mod, 0o755)
	writeFile(t, filepath.Join(mod, "go.mod"), "module example.com\n")
	os.Symlink(hostRO, filepath.Join(mod, "link"))
	locked := filepath.Join(w.ws, "cache", "locked")
	os.MkdirAll(filepath.Join(locked, "inner"), 0o755)
	writeFile(t, filepath.Join(locked, "inner", "f"), "x")
	os.Chmod(filepath.Join(locked, "inner"), 0)
	os.Chmod(locked, 0)
	os.Chmod(mod, 0o555)
	os.Chmod(filepath.Dir(mod), 0o555)
	if err := w.tree.Remove("cache"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(w.ws, "cache")); !os.IsNotExist(err) {
		t.Fatalf("cache survived: %v", err)
	}
	fi, err := os.Stat(hostRO)
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("the linked host directory changed: %v %v", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(hostRO, "keep")); err != nil {
		t.Errorf("the linked host directory lost its file: %v", err)
	}
	w.outsideIntact(t)
}

// Usage counts what the tree holds without following links: a link to a
// large host file counts as the link, not as the file.
func TestTreeUsage(t *testing.T) {
	w := newHostWorld(t)
	big := filepath.Join(w.home, "big")
	if err := os.WriteFile(big, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(w.ws, "a", "b"), 0o755)
	if err := os.WriteFile(filepath.Join(w.ws, "a", "b", "f"), make([]byte, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Symlink(big, filepath.Join(w.ws, "big-link"))
	os.Symlink(w.home, filepath.Join(w.ws, "a", "home-link"))
	u, err := w.tree.Usage()
	if err != nil {
		t.Fatal(err)
	}
	// a, a/b, a/b/f, a/home-link, big-link
	if u.Entries != 5 || u.Truncated {
		t.Errorf("usage = %+v, want 5 entries", u)
	}
	if u.Bytes < 256<<10 || u.Bytes >= 4<<20 {
		t.Errorf("usage = %d bytes: want the 256 KiB file counted and the linked 4 MiB host file not", u.Bytes)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// Opening, using and closing a tree leaves no descriptor behind: a worker
// opens one twice per command (the tripwire before and after it), and a
// leaked descriptor per tree grew its table until exec slowed down (every
// close-on-exec descriptor is closed at each command's exec) and, at the
// descriptor limit, commands failed.
func TestTreeLeavesNoDescriptor(t *testing.T) {
	w := newHostWorld(t)
	os.MkdirAll(filepath.Join(w.ws, ".git", "hooks"), 0o755)
	before := openFDs(t)
	const n = 100
	for range n {
		tr, err := OpenTree(w.ws)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Scan(true); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Stat(".git/hooks"); err != nil {
			t.Fatal(err)
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if grown := openFDs(t) - before; grown >= n/2 {
		t.Fatalf("%d trees opened and closed left %d more descriptors open", n, grown)
	}
}

// Scan.Lacks answers from the walk's listing of the workspace directory:
// true only for a plain ASCII name that no entry matches, even in another
// case (a case-folding file system's lookup would find that one); never
// for a path, ".", "..", a non-ASCII name, or when the directory holds a
// non-ASCII name (whose folding the file system decides); never for a
// Scan that did not list the directory (the zero Scan).
func TestScanLacks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []string // created at the workspace root: a trailing / makes a directory
		lacks   map[string]bool
	}{
		{"empty", nil, map[string]bool{".vscode": true, ".git": true, "": false, ".": false, "..": false, ".config/mise": false, "é": false}},
		{"present", []string{".vscode/", ".envrc", "src/"}, map[string]bool{".vscode": false, ".envrc": false, "src": false, ".git": true, ".vak": true}},
		{"other case", []string{".VSCode/", "MISE.TOML"}, map[string]bool{".vscode": false, ".VSCODE": false, "mise.toml": false, ".mise.toml": true}},
		{"non-ASCII entry", []string{"caf\u00e9", ".vscode/"}, map[string]bool{".git": false, ".envrc": false, ".vscode": false}},
		{"below the root", []string{"sub/.git/"}, map[string]bool{".git": true, "sub": false, "sub/.git": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.entries {
				p := filepath.Join(ws, e)
				if strings.HasSuffix(e, "/") {
					err = os.MkdirAll(p, 0o755)
				} else {
					err = os.WriteFile(p, nil, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			tr, err := OpenTree(ws)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			sc, err := tr.Scan(false)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.lacks {
				if got := sc.Lacks(name); got != want {
					t.Errorf("Lacks(%q) = %v, want %v", name, got, want)
				}
				if (Scan{}).Lacks(name) {
					t.Errorf("the zero Scan lacks %q", name)
				}
			}
		})
	}
}

// Remove empties a directory again when a writer still running adds an
// entry between the last read and the rmdir (an inner container doing
// `mkdir .vscode; echo > .vscode/tasks.json` while the watcher removes the
// directory): a burst of files written into the directory as it is removed
// does not make Remove fail, and the directory is gone afterwards.
func TestTreeRemoveRacingWriter(t *testing.T) {
	w := newHostWorld(t)
	dir := filepath.Join(w.ws, ".vscode")
	for round := 0; round < 20; round++ {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "tasks.json"), "{}")
		done := make(chan int)
		go func() {
			n := 0
			for ; n < 300; n++ {
				if os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", n)), nil, 0o644) != nil {
					break // removed under the writer: it stops, as a path-based writer does
				}
			}
			done <- n
		}()
		err := w.tree.Remove(".vscode")
		n := <-done
		if err != nil {
			t.Fatalf("round %d: Remove with a writer adding %d files: %v", round, n, err)
		}
		if _, err := os.Lstat(dir); err == nil {
			t.Fatalf("round %d: .vscode survived", round)
		}
	}
	w.outsideIntact(t)
}
