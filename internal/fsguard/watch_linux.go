package fsguard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// watchMask is what a Watch asks the kernel to report for each directory:
// every change to the set of its entries and to an entry's metadata
// (mode bits included), and the directory itself going away.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// Reasons a Watch rebuilds its model (the next Scan walks again).
var (
	errOverflow     = errors.New("the kernel's event queue overflowed")
	errRootMoved    = errors.New("the workspace directory itself changed")
	errUnmounted    = errors.New("a file system below the workspace was unmounted")
	errLostName     = errors.New("a mode changed through a name that is gone")
	errLinkedSetuid = errors.New("a file with more than one hard link has the setuid or setgid bit")
)

// Watch is a Tree.Scan kept current by inotify(7): one full walk, which
// also puts a watch on every directory it enters, and after it only the
// entries the kernel reported changed are looked at again. A tripwire pass
// then costs a few system calls plus one per changed entry, where a walk
// costs one or two per entry of the workspace.
//
// A Watch gives the answer Tree.Scan would give at the same moment for the
// same tree, with one difference: it is never Truncated; a tree too large
// or too deep for it makes it walk (see below). The kernel reports every
// change made through its own VFS, from any mount and any mount namespace,
// synchronously with the system call that makes it, so a change made by a
// command that has exited is in the queue. A Watch is therefore only right
// where every writer of the workspace shares this kernel (a worker beside
// its commands), not for a workspace shared with another machine or a
// virtual machine, whose changes raise no event here.
//
// It watches the inside of .git directories too, where it records nothing
// (Tree.Scan does not go there): a name made there is still a name of the
// file it links to. What cannot be kept current is walked again, as
// Tree.Scan does, never guessed at:
//
//   - the kernel's queue overflowed, the workspace directory itself moved,
//     a file system below it was unmounted, or a mode changed through a
//     name that is gone by the time the Watch looks (fchmod through a
//     descriptor after unlink): that Scan walks again and the Watch
//     starts over;
//   - a file with more than one hard link (which the Watch watches itself,
//     see linked) gains the setuid or setgid bit, or changes while the
//     Watch knows none of its names: the same;
//   - inotify is unavailable, there is no /proc/self/fd (watches are added
//     through the descriptor the walk opened, never by a path a command
//     could swap), a directory is on a file system that can change
//     without an event here (see localFS: an NFS home, the share of a
//     Docker Desktop VM, where the user's editor writes from outside),
//     two paths lead to one directory (a bind mount), a directory cannot
//     be opened, or the tree needs more than the Watch's
//     share of the user's watches (directories plus linked files), is
//     deeper than MaxWalkDepth or has more than MaxWalkEntries entries:
//     the Watch gives up for good (Err says why) and every Scan is a
//     Tree.Scan.
//
// A nil *Watch is valid: its Scan is Tree.Scan. A Watch is safe for
// concurrent use.
type Watch struct {
	mu   sync.Mutex
	path string
	// limit is the most watches (directories and linked files) it adds.
	limit int

	ifd      int   // the inotify descriptor, -1 when there is no model
	wake     int   // an eventfd that ends a Wait (its ctx ended), -1 until one is needed
	off      error // set when the Watch gave up for good
	rebuilds int   // builds after the first (tests, the trace)

	// namesFirst says the first build reads names only (NewChangeWatch).
	namesFirst bool

	nodes map[int32]*wnode  // by watch descriptor
	byRel map[string]*wnode // by workspace-relative path ("" the workspace)
	// Files with more than one hard link, watched themselves (see
	// linked), by watch descriptor, by identity, and by the names the
	// model knows for them.
	inodes map[int32]*winode
	byIno  map[fileID]*winode
	linkOf map[string]*winode
	git    map[string]Entry // as Scan.Git
	setuid map[string]bool  // as Scan.Setuid
	root   map[string]bool  // names in the workspace directory
	// rootComplete says the build read the workspace directory to its end.
	rootComplete bool
	rootFold     []string // Scan.rootFold, or nil when it must be redone
	rootASCII    bool

	buf []byte
}

// winode is a watched file with more than one hard link.
type winode struct {
	wd    int32
	id    fileID
	names map[string]bool // the names the model knows (any may be gone)
}

// wnode is a watched directory.
type wnode struct {
	rel      string
	wd       int32
	depth    int
	children map[string]*wnode
}

// watchShare is the part of the user's inotify watches
// (/proc/sys/fs/inotify/max_user_watches) one Watch may take; the user's
// editor and the other sessions need theirs.
const watchShare = 4

// maxWatches caps the watches of one Watch whatever the user's limit.
var maxWatches = 65536

// NewWatch returns a Watch of the canonical workspace ws. It does nothing
// until its first Scan.
func NewWatch(ws string) *Watch {
	return &Watch{path: ws, limit: WatchLimit(), ifd: -1, wake: -1}
}

// NewChangeWatch returns a Watch of the canonical workspace ws whose first
// build reads names only: it stats no regular file, so it knows neither
// which files had the setuid or setgid bit before it nor which have more
// than one hard link, and its Scans report the bits only of files created,
// moved in, linked or changed through a name in the workspace after that
// build. Every later build (after an overflow and the like, when changes
// went unseen) stats every file again, as NewWatch's do.
//
// It is for a workspace whose writers cannot give a file the bits through
// a mode change (the landlock sandbox's seccomp filter refuses chmod and
// its kin with either bit): there a file gains them only by being created
// with them, which the kernel reports to the watch of the directory it is
// made in, linked into or renamed into. What such a Watch does not
// report is a file that had the bits before the build, which no writer
// being watched made. The build then costs a walk for names plus a
// watch per directory: on 100 000 files in 500 directories, 40-60 ms
// where a build that stats every file takes 330 ms.
func NewChangeWatch(ws string) *Watch {
	w := NewWatch(ws)
	w.namesFirst = true
	return w
}

// WatchLimit is the most watches (directories and hard-linked files) one
// Watch adds: a quarter of the user's fs.inotify.max_user_watches, at most
// 65,536.
func WatchLimit() int {
	limit := maxWatches
	if b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n/watchShare < limit {
			limit = n / watchShare
		}
	}
	return limit
}

// CheckWatch says why a Watch of the canonical workspace ws would walk
// around every command from the start (nil: it would not), without a walk:
// inotify, /proc/self/fd and the workspace's file system. What a walk
// finds (too many directories, a bind mount, an unreadable directory) can
// still make it give up later.
func CheckWatch(ws string) error {
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(ifd)
	fd, err := unix.Open(ws, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return err
	}
	if !localFS(int64(fs.Type)) {
		return fmt.Errorf("the workspace is on a file system (type %#x) that another machine or the host of a virtual machine may change without an event here", fs.Type)
	}
	if _, err := unix.InotifyAddWatch(ifd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask); err != nil {
		return fmt.Errorf("inotify_add_watch through /proc/self/fd: %w", err)
	}
	return nil
}

// Close releases the inotify descriptor; later Scans walk.
func (w *Watch) Close() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reset()
	if w.wake >= 0 {
		unix.Close(w.wake)
		w.wake = -1
	}
	if w.off == nil {
		w.off = errors.New("fsguard: watch closed")
	}
	return nil
}

// Wait blocks until the kernel has queued an event for the Watch (the
// next Scan looks at what it reports), ctx ends, or d passes, and reports
// whether events are pending. A Watch without a model (before its first
// Scan, or one that gave up or was closed) has nothing to wait for: Wait
// then waits for ctx or d only, and the caller's next Scan walks. Wait is
// for a watcher's loop, which alternates Wait and Scan in one goroutine:
// a Scan that rebuilds the model while another goroutine waits ends that
// wait (Wait then reports true).
func (w *Watch) Wait(ctx context.Context, d time.Duration) bool {
	if w == nil {
		return sleepCtx(ctx, d)
	}
	w.mu.Lock()
	if w.wake < 0 && w.off == nil {
		if fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err == nil {
			w.wake = fd
		}
	}
	ifd, wake := w.ifd, w.wake
	w.mu.Unlock()
	if wake < 0 {
		return sleepCtx(ctx, d)
	}
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.wake >= 0 {
			unix.Write(w.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		}
	})
	defer stop()
	fds := []unix.PollFd{{Fd: int32(wake), Events: unix.POLLIN}}
	if ifd >= 0 {
		fds = append(fds, unix.PollFd{Fd: int32(ifd), Events: unix.POLLIN})
	}
	deadline := time.Now().Add(d)
	for ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll(fds, int(min(left.Milliseconds()+1, math.MaxInt32)))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil || n == 0:
			return false
		}
		if fds[0].Revents != 0 {
			// ctx ended (or a count left from an earlier ctx): drain it;
			// the loop looks at ctx.
			var b [8]byte
			w.mu.Lock()
			if w.wake == wake {
				unix.Read(wake, b[:])
			}
			w.mu.Unlock()
		}
		if len(fds) > 1 && fds[1].Revents != 0 {
			return true // events, or the descriptor went with a rebuild
		}
	}
	return false
}

// Err says why the Watch gave up (every Scan walks), or nil.
func (w *Watch) Err() error {
	if w == nil {
		return errors.New("fsguard: no watch")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.off
}

// Rebuilds counts the walks the Watch made after its first one.
func (w *Watch) Rebuilds() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rebuilds
}

// Scan returns what t.Scan(setuid) would return now; t must be a Tree of
// the Watch's workspace.
func (w *Watch) Scan(t *Tree, setuid bool) (Scan, error) {
	if w == nil || t.path != w.path {
		return t.Scan(setuid)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.off != nil {
		return t.Scan(setuid)
	}
	first := w.ifd < 0 // no model yet: the first build
	if !first {
		err := w.drain(t)
		if err == nil {
			return w.snapshot(setuid), nil
		}
		if !rebuildable(err) {
			return w.giveUp(t, setuid, err)
		}
	}
	// A build can meet what makes a model stale too (a flood of changes
	// while it walks): it tries once more before it gives up.
	for try := 0; ; try++ {
		if !first || try > 0 {
			w.rebuilds++
		}
		err := w.build(t, first && try == 0 && w.namesFirst)
		if err == nil {
			return w.snapshot(setuid), nil
		}
		if try > 0 || !rebuildable(err) {
			return w.giveUp(t, setuid, err)
		}
	}
}

// rebuildable says whether err makes the model stale (a walk brings it
// back) rather than impossible to keep.
func rebuildable(err error) bool {
	for _, e := range []error{errOverflow, errRootMoved, errUnmounted, errLostName, errLinkedSetuid} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (w *Watch) giveUp(t *Tree, setuid bool, err error) (Scan, error) {
	w.reset()
	w.off = fmt.Errorf("fsguard: watch of %s: %w", w.path, err)
	return t.Scan(setuid)
}

// reset drops the model and the descriptor (with every watch on it).
func (w *Watch) reset() {
	if w.ifd >= 0 {
		unix.Close(w.ifd)
	}
	w.ifd = -1
	w.nodes, w.byRel, w.git, w.setuid, w.root = nil, nil, nil, nil, nil
	w.inodes, w.byIno, w.linkOf = nil, nil, nil
	w.rootFold = nil
}

// build walks the whole workspace, watching every directory it enters
// before it reads it: whatever changes in a directory after its watch is in
// place raises an event, whatever changed before is in what the walk reads.
// namesOnly says it stats no regular file (see NewChangeWatch).
func (w *Watch) build(t *Tree, namesOnly bool) error {
	w.reset()
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	w.ifd = ifd
	w.nodes, w.byRel = map[int32]*wnode{}, map[string]*wnode{}
	w.inodes, w.byIno, w.linkOf = map[int32]*winode{}, map[fileID]*winode{}, map[string]*winode{}
	w.git, w.setuid, w.root = map[string]Entry{}, map[string]bool{}, map[string]bool{}
	if w.buf == nil {
		w.buf = make([]byte, 64<<10)
	}
	fd, err := openat2(t.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0, strictResolve)
	if err != nil {
		return fail("watch", t.path, err)
	}
	defer unix.Close(fd)
	if err := w.walk(t, fd, nil, 0, true, namesOnly); err != nil {
		return err
	}
	// Events raised while the walk read what they report are harmless to
	// look at again; drain them so that the first pass starts clean.
	return w.drain(t)
}

// walk adds the directory fd (at rel, depth levels down) and everything
// below it to the model; full says it is the whole workspace (build), and
// namesOnly that it stats no regular file (a first build, see
// NewChangeWatch). A
// walk of part of it that meets a hard-linked file with the setuid or
// setgid bit fails with errLinkedSetuid: the file's other names may lie
// outside the part. It watches the inside of .git directories too,
// where it records nothing (Tree.Scan never enters them): a name made
// there is still a name of whatever file it links to.
func (w *Watch) walk(t *Tree, fd int, rel []string, depth int, full, namesOnly bool) error {
	var werr error
	if werr = w.watchDir(t, fd, rel, depth); werr != nil {
		return werr
	}
	record := func(dirfd int, name string, rel []string) {
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if err := w.linked(dirfd, name, &st, rel, full); err != nil && werr == nil {
				werr = err
			}
			r := strings.Join(rel, "/")
			w.git[r] = gitEntry(&st, r)
		}
	}
	wk := &walker{
		enter: func([]string) bool { return true },
		visit: func(dirfd int, name string, rel []string, typ uint8) bool {
			switch {
			case inGitDir(rel):
			case IsGitName(name):
				record(dirfd, name, rel)
			case typ == unix.DT_REG && !namesOnly:
				var st unix.Stat_t
				if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
					if err := w.linked(dirfd, name, &st, rel, full); err != nil && werr == nil {
						werr = err
					}
					if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
						w.setuid[strings.Join(rel, "/")] = true
					}
				}
			}
			return werr != nil
		},
		onDir: func(dirfd int, name string, rel []string) {
			if !inGitDir(rel) && IsGitName(name) {
				record(dirfd, name, rel)
			}
		},
		onList: func(r []string, ents []dirent, complete bool) {
			if !complete && werr == nil {
				werr = fmt.Errorf("directory %q: could not read all of it", strings.Join(r, "/"))
			}
			if len(r) == 0 {
				for _, e := range ents {
					w.root[e.name] = true
				}
				w.rootComplete, w.rootFold = complete, nil
			}
		},
	}
	wk.opened = func(cfd int, r []string, err error) bool {
		switch {
		case werr != nil:
		case err == nil:
			werr = w.watchDir(t, cfd, r, len(r))
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
			return false // removed or replaced since it was read: an event says so
		default:
			// A directory it cannot watch (no permission): changes
			// there, hard links included, would go unseen.
			werr = fmt.Errorf("directory %q: %w", strings.Join(r, "/"), err)
		}
		if werr != nil {
			wk.stopped = true
			return false
		}
		return true
	}
	wk.dir(fd, rel, depth)
	if werr == nil && wk.truncated {
		werr = fmt.Errorf("more than %d entries or %d levels", MaxWalkEntries, MaxWalkDepth)
	}
	return werr
}

// inGitDir says whether a parent of rel (a path's segments) is a .git
// entry: the walk of Tree.Scan does not get there.
func inGitDir(rel []string) bool {
	for _, s := range rel[:len(rel)-1] {
		if IsGitName(s) {
			return true
		}
	}
	return false
}

// linked watches the regular file name in dirfd (rel in the workspace,
// st its lstat) itself if it has more than one hard link. A change of its
// mode through another name raises an event only for that name's
// directory, which may be one no walk enters (inside .git), and through a
// descriptor whose name is gone (fchmod after unlink) for a name no
// longer there; the file's own watch sees every change (see drain). full
// says rel was found by a walk of the whole workspace, which finds every
// name; otherwise a linked file with the setuid or setgid bit is
// errLinkedSetuid.
func (w *Watch) linked(dirfd int, name string, st *unix.Stat_t, rel []string, full bool) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink < 2 {
		return nil
	}
	if !full && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		// Its other names may be ones the model does not know (made
		// where no walk goes, or before its own watch was in place).
		return errLinkedSetuid
	}
	r := strings.Join(rel, "/")
	id := idOf(st)
	if in := w.byIno[id]; in != nil {
		in.names[r] = true
		w.linkOf[r] = in
		return nil
	}
	if err := w.atLimit(); err != nil {
		return err
	}
	fd, err := openat2(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW, 0, strictResolve)
	if err != nil {
		return nil // gone or replaced since the stat: an event says so
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || idOf(&fst) != id {
		return nil // replaced since the stat: an event says so
	}
	wd, err := unix.InotifyAddWatch(w.ifd, "/proc/self/fd/"+strconv.Itoa(fd), unix.IN_ATTRIB|unix.IN_DELETE_SELF)
	if err != nil {
		return fmt.Errorf("inotify_add_watch: %w", err)
	}
	in := &winode{wd: int32(wd), id: id, names: map[string]bool{r: true}}
	w.inodes[in.wd], w.byIno[id], w.linkOf[r] = in, in, in
	return nil
}

// atLimit is the error for a Watch that has added as many watches
// (directories and linked files) as it may, nil while there is room.
func (w *Watch) atLimit() error {
	if len(w.nodes)+len(w.inodes) >= w.limit {
		return fmt.Errorf("more than %d directories and linked files (a quarter of fs.inotify.max_user_watches, at most %d)", w.limit, maxWatches)
	}
	return nil
}

// watchDir watches the directory fd, rel in the workspace, through
// /proc/self/fd: the watch is on the directory the walk opened, whatever a
// command did to the path since.
func (w *Watch) watchDir(t *Tree, fd int, rel []string, depth int) error {
	if err := w.atLimit(); err != nil {
		return err
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("statfs %q: %w", strings.Join(rel, "/"), err)
	}
	if !localFS(int64(fs.Type)) {
		return fmt.Errorf("%q is on a file system (type %#x) that another machine or the host of a virtual machine may change without an event here", strings.Join(rel, "/"), fs.Type)
	}
	wd, err := unix.InotifyAddWatch(w.ifd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if err != nil {
		return fmt.Errorf("inotify_add_watch: %w", err)
	}
	r := strings.Join(rel, "/")
	if n, ok := w.nodes[int32(wd)]; ok {
		// The directory the model has at n.rel: moved here since (an
		// event about n.rel is in the queue), or still there as well (a
		// bind mount), which one watch cannot tell apart.
		if stillAt(t, n.rel, fd) {
			return fmt.Errorf("%q and %q are one directory", n.rel, r)
		}
		w.forget(n.rel) // removes the watch too: add it afresh
		if wd, err = unix.InotifyAddWatch(w.ifd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask); err != nil {
			return fmt.Errorf("inotify_add_watch: %w", err)
		}
		if n, ok := w.nodes[int32(wd)]; ok {
			return fmt.Errorf("%q and %q are one directory", n.rel, r)
		}
	}
	n := &wnode{rel: r, wd: int32(wd), depth: depth}
	w.nodes[n.wd], w.byRel[r] = n, n
	if len(rel) > 0 {
		if p := w.byRel[strings.Join(rel[:len(rel)-1], "/")]; p != nil {
			if p.children == nil {
				p.children = map[string]*wnode{}
			}
			p.children[rel[len(rel)-1]] = n
		}
	}
	return nil
}

// localFS says whether a file system of type magic (statfs f_type) is
// changed only through this kernel: a local disk's or memory's. A network
// file system (NFS, SMB, Ceph), a virtual machine's share (virtiofs, 9p,
// and FUSE in general) can change without an inotify event here.
func localFS(magic int64) bool {
	switch magic {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.F2FS_SUPER_MAGIC,
		unix.BCACHEFS_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.RAMFS_MAGIC, unix.OVERLAYFS_SUPER_MAGIC,
		0x2fc12fc1: // ZFS
		return true
	}
	return false
}

// stillAt says whether rel leads to the directory fd.
func stillAt(t *Tree, rel string, fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return true
	}
	if rel == "" {
		var root unix.Stat_t
		return unix.Fstat(t.fd, &root) != nil || idOf(&root) == idOf(&st)
	}
	e, err := t.Stat(rel)
	return err == nil && e.Kind == Dir && (fileID{e.Dev, e.Ino}) == idOf(&st)
}

// drain reads the kernel's queue to its end and looks again at every entry
// it names.
func (w *Watch) drain(t *Tree) error {
	pending := map[string]bool{} // rel: whether its metadata changed
	movedFrom := map[uint32]string{}
	touched := map[*winode]bool{} // linked files whose metadata changed
	for {
		n, err := unix.Read(w.ifd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN || n == 0 {
			break
		}
		if err != nil {
			return fmt.Errorf("inotify read: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(w.buf[off:]))
			mask := binary.NativeEndian.Uint32(w.buf[off+4:])
			cookie := binary.NativeEndian.Uint32(w.buf[off+8:])
			nameLen := int(binary.NativeEndian.Uint32(w.buf[off+12:]))
			start := off + unix.SizeofInotifyEvent
			if start+nameLen > n {
				return fmt.Errorf("inotify read: a malformed event")
			}
			name := w.buf[start : start+nameLen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			off = start + nameLen
			if mask&unix.IN_Q_OVERFLOW != 0 {
				return errOverflow
			}
			if in := w.inodes[wd]; in != nil {
				if mask&(unix.IN_DELETE_SELF|unix.IN_IGNORED) != 0 {
					delete(w.inodes, wd)
					delete(w.byIno, in.id)
					for r := range in.names {
						delete(w.linkOf, r)
					}
				} else {
					touched[in] = true
				}
				continue
			}
			node := w.nodes[wd]
			if node == nil {
				continue // a watch the model dropped
			}
			if mask&unix.IN_UNMOUNT != 0 {
				return errUnmounted
			}
			if len(name) == 0 {
				// The directory itself: deleted, moved, its watch gone.
				if mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
					if node.rel == "" {
						return errRootMoved
					}
					if _, ok := pending[node.rel]; !ok {
						pending[node.rel] = false
					}
				}
				continue
			}
			r := path.Join(node.rel, string(name))
			pending[r] = pending[r] || mask&unix.IN_ATTRIB != 0
			// A file whose mode changed and that was then renamed is
			// looked at under its new name (chmod, then rename into
			// place, is how many tools install a file).
			switch {
			case mask&unix.IN_MOVED_FROM != 0:
				movedFrom[cookie] = r
			case mask&unix.IN_MOVED_TO != 0:
				if from, ok := movedFrom[cookie]; ok {
					pending[from] = false
				}
			}
		}
	}
	if err := w.updateAll(t, pending); err != nil {
		return err
	}
	return w.checkLinked(t, touched)
}

// checkLinked looks at the linked files whose metadata changed: through
// a name the model knows, it finds the mode the file has now. One with the
// setuid or setgid bit has names the model may not know (all of them are
// in the Scan), and one the model knows no name of left is unknown: the
// Scan walks again for both. Any other change (a link made or removed, the
// bits cleared) at most removes names from the model's setuid files.
func (w *Watch) checkLinked(t *Tree, touched map[*winode]bool) error {
	for in := range touched {
		if w.inodes[in.wd] != in {
			continue
		}
		found := false
		for r := range in.names {
			e, err := t.Stat(r)
			if err != nil || e.Kind != File || (fileID{e.Dev, e.Ino}) != in.id {
				continue
			}
			if e.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
				return errLinkedSetuid
			}
			found = true
			break
		}
		if !found {
			return errLostName
		}
	}
	if len(touched) > 0 {
		// Bits cleared through one name are gone from every name: look
		// again at every file the model holds as setuid (a handful).
		for r := range w.setuid {
			if e, err := t.Stat(r); err != nil || e.Kind != File || e.Mode&(unix.S_ISUID|unix.S_ISGID) == 0 {
				delete(w.setuid, r)
			}
		}
	}
	return nil
}

// updateAll looks again at every entry in pending (rel: whether its
// metadata changed).
func (w *Watch) updateAll(t *Tree, pending map[string]bool) error {
	if len(pending) == 0 {
		return nil
	}
	rels := make([]string, 0, len(pending))
	for r := range pending {
		rels = append(rels, r)
	}
	// Parents first: a directory walked again covers everything below
	// it, since the walk came after every event read here.
	depth := func(r string) int { return strings.Count(r, "/") }
	slices.SortFunc(rels, func(a, b string) int {
		if d := depth(a) - depth(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	walked := map[string]bool{}
	for _, r := range rels {
		covered := false
		for p := r; !covered; {
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				break
			}
			p = p[:i]
			covered = walked[p]
		}
		if covered {
			continue
		}
		dir, err := w.update(t, r, pending[r])
		if err != nil {
			return err
		}
		if dir {
			walked[r] = true
		}
	}
	return nil
}

// update looks at rel again: it forgets what the model knew of it (and
// below it) and records what is there now. attrib says an event reported
// a change of rel's metadata. dir says it walked a directory.
func (w *Watch) update(t *Tree, rel string, attrib bool) (dir bool, err error) {
	w.forget(rel)
	parentRel, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		parentRel, name = rel[:i], rel[i+1:]
	}
	parent := w.byRel[parentRel]
	if parent == nil {
		return false, nil // not in a directory the walk enters
	}
	pfd := t.fd
	if parentRel != "" {
		if pfd, err = openat2(t.fd, parentRel, unix.O_PATH|unix.O_DIRECTORY, 0, strictResolve); err != nil {
			// The parent changed after the events were read (or its own
			// event is later in this pass): look at the parent.
			return w.update(t, parentRel, false)
		}
		defer unix.Close(pfd)
	}
	var st unix.Stat_t
	if unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		if attrib {
			// A mode changed through a name that is gone: through a
			// descriptor, on a file that may have other names.
			return false, errLostName
		}
		return false, nil // gone: the walk does not see it either
	}
	if parentRel == "" {
		w.root[name], w.rootFold = true, nil
	}
	segs := strings.Split(rel, "/")
	if err := w.linked(pfd, name, &st, segs, false); err != nil {
		return false, err
	}
	e := entryOf(&st)
	inGit := inGitDir(segs)
	switch {
	case inGit:
	case IsGitName(name):
		w.git[rel] = gitEntry(&st, rel)
	case e.Kind == File:
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			w.setuid[rel] = true
		}
	}
	if e.Kind != Dir {
		return false, nil
	}
	if parent.depth+1 >= MaxWalkDepth {
		return false, fmt.Errorf("%q: more than %d levels", rel, MaxWalkDepth)
	}
	cfd, err := openat2(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, strictResolve)
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
		return false, nil // replaced since the fstatat: an event later in the queue says so
	default:
		return false, fmt.Errorf("directory %q: %w", rel, err)
	}
	defer unix.Close(cfd)
	return true, w.walk(t, cfd, segs, parent.depth+1, false, false)
}

// forget drops rel, and everything the model holds below it, from the
// model.
func (w *Watch) forget(rel string) {
	delete(w.git, rel)
	delete(w.setuid, rel)
	if in := w.linkOf[rel]; in != nil {
		delete(in.names, rel)
		delete(w.linkOf, rel)
	}
	if !strings.Contains(rel, "/") && w.root[rel] {
		delete(w.root, rel)
		w.rootFold = nil
	}
	n := w.byRel[rel]
	if n == nil {
		return
	}
	prefix := rel + "/"
	for r := range w.git {
		if strings.HasPrefix(r, prefix) {
			delete(w.git, r)
		}
	}
	for r := range w.setuid {
		if strings.HasPrefix(r, prefix) {
			delete(w.setuid, r)
		}
	}
	for r, in := range w.linkOf {
		if strings.HasPrefix(r, prefix) {
			delete(in.names, r)
			delete(w.linkOf, r)
		}
	}
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		if p := w.byRel[rel[:i]]; p != nil {
			delete(p.children, rel[i+1:])
		}
	} else if p := w.byRel[""]; p != nil {
		delete(p.children, rel)
	}
	w.dropNode(n)
}

func (w *Watch) dropNode(n *wnode) {
	for _, c := range n.children {
		w.dropNode(c)
	}
	delete(w.nodes, n.wd)
	delete(w.byRel, n.rel)
	unix.InotifyRmWatch(w.ifd, uint32(n.wd))
}

// snapshot is the model as a Scan the caller owns.
func (w *Watch) snapshot(setuid bool) Scan {
	sc := Scan{Git: make(map[string]Entry, len(w.git))}
	for r, e := range w.git {
		sc.Git[r] = e
	}
	if setuid {
		for r := range w.setuid {
			sc.Setuid = append(sc.Setuid, r)
		}
		slices.Sort(sc.Setuid)
	}
	if w.rootComplete {
		if w.rootFold == nil {
			w.rootFold, w.rootASCII = make([]string, 0, len(w.root)), true
			for name := range w.root {
				if !isASCII(name) {
					w.rootASCII = false
				}
				w.rootFold = append(w.rootFold, strings.ToLower(name))
			}
			slices.Sort(w.rootFold)
		}
		if w.rootASCII {
			sc.rootFold, sc.rootListed = w.rootFold, true
		}
	}
	return sc
}
