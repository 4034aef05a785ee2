package fsguard

import (
	"context"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Host-side maintenance of a workspace after a sandboxed command (the
// tripwire): deciding what a protected path is now, removing what a command
// planted, finding git control entries and setuid files. None of it follows
// a symbolic link: the command controls every name in the workspace, and a
// host-side operation that followed its links would act outside the
// workspace (a `.git -> ~/.kube` link would make the tripwire that removes a
// fresh `.git/config` delete `~/.kube/config`).

// Kind says what a workspace path is, seen without following links.
type Kind uint8

// Kinds of Entry.
const (
	Absent  Kind = iota // nothing there (or a parent is not a directory)
	Dir                 // a directory
	File                // a regular file
	Link                // the path itself is a symbolic link
	ViaLink             // a parent component is a symbolic link (Entry.Via)
	Other               // a FIFO, socket or device
)

func (k Kind) String() string {
	switch k {
	case Absent:
		return "absent"
	case Dir:
		return "directory"
	case File:
		return "file"
	case Link:
		return "symbolic link"
	case ViaLink:
		return "reached through a symbolic link"
	}
	return "special file"
}

// Entry is what a workspace path is right now.
type Entry struct {
	Kind Kind
	// Via is the workspace-relative path of the first symbolic link on the
	// way (Kind ViaLink), or the path itself (Kind Link).
	Via string
	// Dev and Ino identify the entry (for Link and ViaLink: the link).
	Dev, Ino uint64
	// Mode is the raw st_mode.
	Mode uint32
}

// Same reports whether e and o are the same file system object in the same
// shape: a path whose entry was replaced, renamed over or redirected through
// a new link is not the Same.
func (e Entry) Same(o Entry) bool {
	if e.Kind != o.Kind || e.Via != o.Via {
		return false
	}
	return e.Kind == Absent || (e.Dev == o.Dev && e.Ino == o.Ino)
}

// Scan is what one walk of the workspace found.
type Scan struct {
	// Git maps the workspace-relative path of every entry named .git (any
	// case; directory, gitdir file or link) to what it is. Walks never enter
	// a .git directory.
	Git map[string]Entry
	// Setuid lists regular files with the setuid or setgid bit.
	Setuid []string
	// Truncated says the walk stopped at MaxWalkEntries or MaxWalkDepth.
	Truncated bool

	// rootFold holds the names in the workspace directory itself, folded
	// to lower case and sorted, when rootListed: the walk read all of it
	// and every name is ASCII.
	rootFold   []string
	rootListed bool
}

// Lacks reports whether the walk found no entry in the workspace directory
// itself that a lookup of name (one path segment) could find, so that the
// tripwire can take name, and every path below it, as absent without a
// system call of its own. It answers true only when the walk read the
// whole directory and name is an ordinary ASCII name, and it compares
// names as a case-folding file system would (an ext4 or f2fs directory
// with +F, vfat, SMB, a macOS host's share): there a lookup of .vscode
// finds .VSCode, which an exact comparison would miss, and the tripwire
// with it. A directory holding any non-ASCII name answers false for every
// name: how such a name folds (Unicode case folding, normalization,
// ignorable code points) depends on the file system. An entry created
// after the walk read the directory is not seen (see the tripwire).
func (s Scan) Lacks(name string) bool {
	if !s.rootListed || name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || !isASCII(name) {
		return false
	}
	_, found := slices.BinarySearch(s.rootFold, strings.ToLower(name))
	return !found
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// GitRoots returns the directories (workspace-relative, "" for the
// workspace itself) that hold a .git entry, sorted.
func (s Scan) GitRoots() []string {
	var roots []string
	for rel := range s.Git {
		roots = append(roots, parentOf(rel))
	}
	slices.Sort(roots)
	return slices.Compact(roots)
}

// GitNames returns the workspace-relative paths of the .git entries, sorted.
func (s Scan) GitNames() []string {
	var names []string
	for rel := range s.Git {
		names = append(names, rel)
	}
	slices.Sort(names)
	return names
}

// IsGitName reports whether a path segment names a git control entry (.git,
// compared as a case-folding file system would). Every walk asks it of
// every entry, so the common case is cheap: a name of fewer than four
// bytes cannot be one, and in an ASCII name there is nothing to strip (every
// ignorable code point, and every code point that folds to a letter of
// ".git", is outside ASCII).
func IsGitName(seg string) bool {
	if len(seg) < len(".git") {
		return false
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] >= utf8.RuneSelf {
			return isGitNameSlow(seg)
		}
	}
	return len(seg) == len(".git") && strings.EqualFold(seg, ".git")
}

// isGitNameSlow is IsGitName for any name.
func isGitNameSlow(seg string) bool { return strings.EqualFold(stripIgnorable(seg), ".git") }

// ExpandProtected applies protected (workspace-relative entries) to every
// git repository of the workspace: entries below .git (".git/hooks",
// ".git/config", ...) are repeated below each nested repository's .git
// (roots from Scan.GitRoots), so a submodule or a nested clone has its hooks
// and config protected like the top-level one. Other entries (.vscode,
// .envrc, ...) apply at the workspace root only. The result is sorted and
// free of duplicates.
func ExpandProtected(protected []string, roots []string) []string {
	out := slices.Clone(protected)
	for _, root := range roots {
		if root == "" {
			continue
		}
		for _, p := range protected {
			segs := strings.Split(path.Clean(p), "/")
			if len(segs) > 1 && IsGitName(segs[0]) {
				out = append(out, root+"/"+path.Clean(p))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func parentOf(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

// Plan is what a backend mounts before a command so that the command
// cannot change the protected paths: Pin directories are bound onto
// themselves read-write (a mount point cannot be renamed, removed or
// replaced, so `.git` and the parents of protected paths stay where they
// are while their contents stay writable), ReadOnly entries are bound
// read-only. Both hold only entries that exist as real directories or
// files, reached without a symbolic link; they are workspace-relative and
// sorted so that a parent comes before what lies below it.
type Plan struct {
	Pin      []string
	ReadOnly []string
	// Protected is the configured list expanded to every nested repository
	// (ExpandProtected): what the tripwire checks after the command.
	Protected []string
	// Scan is the walk the plan was made from.
	Scan Scan
}

// PlanWorkspace opens workspace as a Tree, makes the Plan for protected
// (configured workspace-relative entries) and closes it. Without
// beneath-resolution it fails with ErrUnsupported, as OpenTree does.
func PlanWorkspace(workspace string, protected []string) (Plan, error) {
	t, err := OpenTree(workspace)
	if err != nil {
		return Plan{}, err
	}
	defer t.Close()
	return t.Plan(protected)
}

// planOf is a Plan's Pin and ReadOnly from what a walk found: git, the
// workspace's .git entries (Scan.Git), and prot, the configured protected
// paths expanded to every repository (ExpandProtected) with what each is.
// A protected path that exists as a directory or file is mounted
// read-only, one that is absent or reached through a link is not (the
// tripwire watches it); a .git directory is pinned, a .git file read-only;
// the parents of both are pinned.
func planOf(git, prot map[string]Entry) (pin, ro []string) {
	roSet, pinSet := map[string]bool{}, map[string]bool{}
	parents := func(rel string) {
		segs := strings.Split(rel, "/")
		for i := 1; i < len(segs); i++ {
			pinSet[strings.Join(segs[:i], "/")] = true
		}
	}
	for rel, e := range prot {
		if e.Kind == Absent || e.Kind == Link || e.Kind == ViaLink {
			continue
		}
		rel = path.Clean(rel)
		if e.Kind == Dir || e.Kind == File {
			roSet[rel] = true
		}
		parents(rel)
	}
	for rel, e := range git {
		switch e.Kind {
		case Dir:
			pinSet[rel] = true
		case File:
			roSet[rel] = true
		}
		parents(rel)
	}
	for rel := range pinSet {
		if !roSet[rel] {
			pin = append(pin, rel)
		}
	}
	for rel := range roSet {
		ro = append(ro, rel)
	}
	sortShallowFirst(pin)
	sortShallowFirst(ro)
	return pin, ro
}

// sortShallowFirst orders paths by depth, then by name.
func sortShallowFirst(ps []string) {
	slices.SortFunc(ps, func(a, b string) int {
		if d := strings.Count(a, "/") - strings.Count(b, "/"); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
}

// Abs joins workspace-relative paths (a Plan's) to workspace.
func Abs(workspace string, rels []string) []string {
	var out []string
	for _, r := range rels {
		out = append(out, filepath.Join(workspace, r))
	}
	return out
}

// sleepCtx waits for ctx or d (a Watch.Wait with no events to wait for);
// it reports false: no events.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}
