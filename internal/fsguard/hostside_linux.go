package fsguard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Tree is a workspace opened for host-side maintenance. Every path is
// resolved beneath the workspace descriptor, one component at a time,
// without following any symbolic link (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS, fstatat AT_SYMLINK_NOFOLLOW, unlinkat).
type Tree struct {
	fd   int
	path string
}

// OpenTree opens the canonical workspace for host-side maintenance.
func OpenTree(workspace string) (*Tree, error) {
	if !filepath.IsAbs(workspace) || filepath.Clean(workspace) != workspace || workspace == "/" {
		return nil, pathError("open", workspace, ErrInvalidPath, "workspace must be a clean absolute path other than /")
	}
	fd, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fsguard: open workspace %q: %w", workspace, err)
	}
	// A probe that the kernel has openat2(2), until it has once answered:
	// a worker opens a tree twice per command, and the answer does not
	// change (an operation that fails later is an error of its own). Its
	// descriptor is not kept (a kept one would leak).
	if !openat2Works.Load() {
		probe, err := openat2(fd, ".", unix.O_PATH, 0, strictResolve)
		if err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.ENOSYS) {
				return nil, fmt.Errorf("fsguard: %w: the kernel lacks openat2(2)", ErrUnsupported)
			}
			return nil, fmt.Errorf("fsguard: open workspace %q: %w", workspace, err)
		}
		unix.Close(probe)
		openat2Works.Store(true)
	}
	return &Tree{fd: fd, path: workspace}, nil
}

// openat2Works is set once OpenTree's probe of openat2 succeeded.
var openat2Works atomic.Bool

// Path is the workspace path.
func (t *Tree) Path() string { return t.path }

// Root is the device and inode of the directory the Tree holds open: what
// the workspace was when it was opened, whatever its path leads to now.
func (t *Tree) Root() (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(t.fd, &st); err != nil {
		return 0, 0, fmt.Errorf("fsguard: stat workspace %q: %w", t.path, err)
	}
	return st.Dev, st.Ino, nil
}

// Close releases the workspace descriptor.
func (t *Tree) Close() error {
	if t.fd < 0 {
		return nil
	}
	err := unix.Close(t.fd)
	t.fd = -1
	return err
}

// splitRel validates a workspace-relative path and splits it.
func splitRel(op, rel string) ([]string, error) {
	if rel == "" || strings.IndexByte(rel, 0) >= 0 || path.IsAbs(rel) {
		return nil, pathError(op, rel, ErrInvalidPath, "must be a non-empty workspace-relative path")
	}
	c := path.Clean(rel)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return nil, pathError(op, rel, ErrOutside, "")
	}
	return strings.Split(c, "/"), nil
}

func entryOf(st *unix.Stat_t) Entry {
	e := Entry{Dev: uint64(st.Dev), Ino: st.Ino, Mode: st.Mode}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Kind = Dir
	case unix.S_IFREG:
		e.Kind = File
	case unix.S_IFLNK:
		e.Kind = Link
	default:
		e.Kind = Other
	}
	return e
}

// Stat says what rel is, without following any link: a link on the way is
// reported as ViaLink (with the link's own path and identity), the path
// itself being a link as Link.
func (t *Tree) Stat(rel string) (Entry, error) {
	segs, err := splitRel("stat", rel)
	if err != nil {
		return Entry{}, err
	}
	cur := t.fd
	defer func() {
		if cur != t.fd {
			unix.Close(cur)
		}
	}()
	for i, s := range segs {
		var st unix.Stat_t
		if err := unix.Fstatat(cur, s, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				return Entry{Kind: Absent}, nil
			}
			return Entry{}, fail("stat", rel, err)
		}
		e := entryOf(&st)
		last := i == len(segs)-1
		if e.Kind == Link {
			e.Via = strings.Join(segs[:i+1], "/")
			if !last {
				e.Kind = ViaLink
			}
			return e, nil
		}
		if last {
			return e, nil
		}
		if e.Kind != Dir {
			return Entry{Kind: Absent}, nil
		}
		fd, err := openat2(cur, s, unix.O_PATH|unix.O_DIRECTORY, 0, strictResolve)
		if err != nil {
			// Swapped for a link or removed since the fstatat: a
			// concurrent change, reported rather than guessed at.
			return Entry{}, fail("stat", rel, err)
		}
		if cur != t.fd {
			unix.Close(cur)
		}
		cur = fd
	}
	return Entry{Kind: Absent}, nil
}

// Remove removes rel as it is: a link as the link itself, a file, or a
// directory with everything below it, never following a link and never
// crossing into a mount (a mount point below cannot be removed and is an
// error). A parent component that is a link is an ErrSymlink error: remove
// that link instead (Entry.Via). A missing rel is not an error.
func (t *Tree) Remove(rel string) error {
	segs, err := splitRel("remove", rel)
	if err != nil {
		return err
	}
	dir, base := strings.Join(segs[:len(segs)-1], "/"), segs[len(segs)-1]
	if dir == "" {
		dir = "."
	}
	dfd, err := openat2(t.fd, dir, unix.O_PATH|unix.O_DIRECTORY, 0, strictResolve)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fail("remove", rel, err)
	}
	defer unix.Close(dfd)
	if err := removeAt(dfd, base, 0); err != nil {
		return fmt.Errorf("fsguard: remove %q: %w", rel, err)
	}
	return nil
}

// removeAt removes name in directory dfd, recursively, without following links.
func removeAt(dfd int, name string, depth int) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	if depth >= MaxWalkDepth {
		return fmt.Errorf("deeper than %d levels", MaxWalkDepth)
	}
	fd, oerr := openDirForRemoval(dfd, name)
	if oerr != nil {
		if errors.Is(oerr, unix.ENOTDIR) {
			return err // not a directory after all: the unlink's own error
		}
		return oerr
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	// A writer still running (an inner container planting a directory and
	// then its file) can add an entry between the last read and the rmdir:
	// empty the directory again, a bounded number of times with a growing
	// pause, rather than fail on the first such race.
	for pass := 0; ; pass++ {
		if err := emptyDir(f, fd, name, depth); err != nil {
			return err
		}
		err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
		if !errors.Is(err, unix.ENOTEMPTY) || pass == removePasses-1 {
			return err
		}
		time.Sleep(time.Duration(1<<pass) * time.Millisecond)
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
}

// removePasses bounds how often removeAt empties a directory that a
// concurrent writer keeps refilling (the pauses between passes add up to
// about a quarter of a second).
const removePasses = 8

// emptyDir removes every entry of the open directory f (descriptor fd, named
// name for errors), returning the first failure after trying them all.
func emptyDir(f *os.File, fd int, name string, depth int) error {
	var first error
	for {
		names, rerr := f.Readdirnames(1024)
		for _, n := range names {
			if e := removeAt(fd, n, depth+1); e != nil && first == nil {
				first = fmt.Errorf("%s/%w", name, e)
			}
		}
		if rerr != nil || len(names) == 0 {
			return first
		}
	}
}

// openDirForRemoval opens the directory name in dfd for reading, without
// following a link or crossing a mount, and makes it writable and
// searchable by its owner (a tree written by tools such as Go's module
// cache holds read-only directories, whose entries cannot be unlinked
// otherwise). The mode is changed through the descriptor, never by path: a
// directory swapped for a link in the meantime fails to open instead.
func openDirForRemoval(dfd int, name string) (int, error) {
	how := uint64(strictResolve | unix.RESOLVE_NO_XDEV)
	fd, err := openat2(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, how)
	if errors.Is(err, unix.EACCES) {
		// Not even readable (mode 0): fix it through an O_PATH descriptor
		// of the very directory (its /proc magic link names the inode the
		// descriptor holds, not a path that could be swapped).
		pfd, perr := openat2(dfd, name, unix.O_PATH|unix.O_DIRECTORY, 0, how)
		if perr != nil {
			return -1, perr
		}
		var st unix.Stat_t
		if unix.Fstat(pfd, &st) == nil && int(st.Uid) == unix.Geteuid() {
			unix.Chmod("/proc/self/fd/"+strconv.Itoa(pfd), (st.Mode&0o7777)|0o700)
		}
		unix.Close(pfd)
		fd, err = openat2(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, how)
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&0o300 != 0o300 && int(st.Uid) == unix.Geteuid() {
		unix.Fchmod(fd, (st.Mode&0o7777)|0o700)
	}
	return fd, nil
}

// Usage is what a tree holds, counted without following links.
type Usage struct {
	// Bytes is the space the entries take on disk (st_blocks * 512).
	Bytes int64
	// Entries counts files, directories, links and special files.
	Entries int
	// Truncated says the walk stopped at MaxWalkEntries or MaxWalkDepth.
	Truncated bool
}

// Usage walks the whole tree without following links (a link counts as
// itself) and adds up what its entries take on disk.
func (t *Tree) Usage() (Usage, error) {
	fd, err := openat2(t.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, strictResolve)
	if err != nil {
		return Usage{}, fail("usage", t.path, err)
	}
	defer unix.Close(fd)
	var u Usage
	add := func(dirfd int, name string) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			u.Bytes += st.Blocks * 512
			u.Entries++
		}
	}
	w := &walker{
		enter: func([]string) bool { return true },
		visit: func(dirfd int, name string, _ []string, _ uint8) bool {
			add(dirfd, name)
			return false
		},
		onDir: func(dirfd int, name string, _ []string) { add(dirfd, name) },
	}
	w.dir(fd, nil, 0)
	u.Truncated = w.truncated
	return u, nil
}

// gitEntry is the Scan.Git entry of the .git entry rel with lstat st: a
// link carries its own path in Via.
func gitEntry(st *unix.Stat_t, rel string) Entry {
	e := entryOf(st)
	if e.Kind == Link {
		e.Via = rel
	}
	return e
}

// Scan walks the workspace without following links or entering .git
// directories, collecting every .git entry and (when setuid is set) every
// regular file with the setuid or setgid bit. It stops at MaxWalkEntries
// entries or MaxWalkDepth levels (Scan.Truncated).
func (t *Tree) Scan(setuid bool) (Scan, error) {
	fd, err := openat2(t.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, strictResolve)
	if err != nil {
		return Scan{}, fail("scan", t.path, err)
	}
	defer unix.Close(fd)
	sc := Scan{Git: map[string]Entry{}}
	record := func(dirfd int, name string, rel []string) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			r := strings.Join(rel, "/")
			sc.Git[r] = gitEntry(&st, r)
		}
	}
	w := &walker{
		enter: func(rel []string) bool {
			if IsGitName(rel[len(rel)-1]) {
				// The walker hands directories to enter only; record it
				// here (its descriptor is the parent's, opened below).
				return false
			}
			return true
		},
		visit: func(dirfd int, name string, rel []string, typ uint8) bool {
			if IsGitName(name) {
				record(dirfd, name, rel)
				return false
			}
			if setuid && typ == unix.DT_REG && setIDFile(dirfd, name) {
				sc.Setuid = append(sc.Setuid, strings.Join(rel, "/"))
			}
			return false
		},
	}
	w.onDir = func(dirfd int, name string, rel []string) {
		if IsGitName(name) {
			record(dirfd, name, rel)
		}
	}
	w.onList = func(rel []string, ents []dirent, complete bool) {
		if len(rel) == 0 {
			sc.listRoot(ents, complete)
		}
	}
	w.dir(fd, nil, 0)
	sc.Truncated = w.truncated
	return sc, nil
}

// setIDFile says whether name in dirfd is a regular file with the setuid
// or setgid bit (not following a link).
func setIDFile(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0
}

// listRoot records the entries of the workspace directory (ents, read to
// the end when complete) for Scan.Lacks.
func (s *Scan) listRoot(ents []dirent, complete bool) {
	if !complete {
		return
	}
	fold := make([]string, 0, len(ents))
	for _, e := range ents {
		if !isASCII(e.name) {
			return
		}
		fold = append(fold, strings.ToLower(e.name))
	}
	slices.Sort(fold)
	s.rootFold, s.rootListed = fold, true
}

// ClearSetuid removes the setuid and setgid bits of the regular file rel
// (resolved without following links). It returns the permission bits it
// found (st_mode & 07777).
func (t *Tree) ClearSetuid(rel string) (uint32, error) {
	segs, err := splitRel("chmod", rel)
	if err != nil {
		return 0, err
	}
	dir, base := strings.Join(segs[:len(segs)-1], "/"), segs[len(segs)-1]
	if dir == "" {
		dir = "."
	}
	dfd, err := openat2(t.fd, dir, unix.O_PATH|unix.O_DIRECTORY, 0, strictResolve)
	if err != nil {
		return 0, fail("chmod", rel, err)
	}
	defer unix.Close(dfd)
	fd, err := openat2(dfd, base, unix.O_PATH, 0, strictResolve)
	if err != nil {
		return 0, fail("chmod", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fail("chmod", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, pathError("chmod", rel, ErrNotRegular, "")
	}
	mode := st.Mode & 0o7777
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) == 0 {
		return mode, nil
	}
	// An O_PATH descriptor cannot be fchmod'ed; its /proc/self/fd link
	// names exactly this inode (no path lookup in the workspace).
	newMode := st.Mode & 0o1777
	err = unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), newMode, 0)
	if err != nil {
		// No /proc: open the file itself (it is a regular file, opened
		// without following links or blocking).
		rfd, oerr := openat2(dfd, base, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0, strictResolve)
		if oerr != nil {
			return mode, fail("chmod", rel, err)
		}
		defer unix.Close(rfd)
		var st2 unix.Stat_t
		if unix.Fstat(rfd, &st2) != nil || st2.Ino != st.Ino || st2.Dev != st.Dev {
			return mode, pathError("chmod", rel, ErrNotRegular, "changed while being fixed")
		}
		if err = unix.Fchmod(rfd, newMode); err != nil {
			return mode, fail("chmod", rel, err)
		}
	}
	return mode, nil
}

// Plan walks the workspace and says what to mount for protected (the
// configured workspace-relative entries): see Plan.
func (t *Tree) Plan(protected []string) (Plan, error) {
	sc, err := t.Scan(false)
	if err != nil {
		return Plan{}, err
	}
	pl := Plan{Scan: sc, Protected: ExpandProtected(protected, sc.GitRoots())}
	prot := make(map[string]Entry, len(pl.Protected))
	for _, rel := range pl.Protected {
		e, err := t.Stat(rel)
		if err != nil {
			continue // nothing to mount; the tripwire watches it
		}
		prot[rel] = e
	}
	pl.Pin, pl.ReadOnly = planOf(sc.Git, prot)
	return pl, nil
}
