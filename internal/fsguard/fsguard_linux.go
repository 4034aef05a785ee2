package fsguard

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Resolution rules. Every open is relative to a descriptor inside the
// workspace and may never climb above the workspace descriptor.
const (
	// readResolve follows symbolic links that stay beneath the workspace.
	readResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
	// strictResolve follows no symbolic link at all: writes, edits and
	// everything glob and grep open while walking.
	strictResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
)

// tempPrefix names the temporary files Write creates next to their target.
const tempPrefix = ".vak-tmp-"

// Open returns a Root serving the workspace, which must be the canonical
// absolute path (paths.CanonicalWorkspace) of a directory. It fails with
// ErrUnsupported when the kernel lacks openat2(2).
func Open(workspace string, opts Options) (*Root, error) {
	if err := validatePath("open", workspace); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(workspace) || filepath.Clean(workspace) != workspace {
		return nil, pathError("open", workspace, ErrInvalidPath, "workspace must be a clean absolute path")
	}
	if workspace == "/" {
		return nil, pathError("open", workspace, ErrInvalidPath, "the root directory cannot be a workspace")
	}
	if real, err := filepath.EvalSymlinks(workspace); err != nil {
		return nil, fmt.Errorf("fsguard: open workspace %q: %w", workspace, err)
	} else if real != workspace {
		return nil, pathError("open", workspace, ErrInvalidPath, "workspace is not canonical (it resolves through a symbolic link)")
	}
	prot, err := normalizeProtected(opts.Protected)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fsguard: open workspace %q: %w", workspace, err)
	}
	// Probe openat2: without it there is no safe resolution, and no
	// fallback to string checks.
	probe, err := openat2(fd, ".", unix.O_PATH|unix.O_DIRECTORY, 0, readResolve)
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("fsguard: open workspace %q: %w: openat2(2) with RESOLVE_BENEATH is unavailable (Linux 5.6 or newer is required): %w", workspace, ErrUnsupported, err)
		}
		return nil, fmt.Errorf("fsguard: open workspace %q: %w", workspace, err)
	}
	unix.Close(probe)
	return &Root{fd: fd, path: workspace, opts: opts.withDefaults(), protected: prot}, nil
}

// Close releases the workspace descriptor. Operations after Close fail with
// ErrClosed; Close waits for operations in flight.
func (r *Root) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 || r.path == "" {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}

// acquire takes the read lock for one operation; release with r.mu.RUnlock.
func (r *Root) acquire(op, p string) error {
	r.mu.RLock()
	if r.fd < 0 || r.path == "" { // closed, or a zero Root not made by Open
		r.mu.RUnlock()
		return pathError(op, p, ErrClosed, "")
	}
	return nil
}

// openat2 wraps unix.Openat2, always adding O_CLOEXEC and retrying the
// transient EINTR and EAGAIN (the kernel's answer to a concurrent rename it
// could not rule out as an escape).
func openat2(dirfd int, name string, flags, mode, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolve}
	var err error
	for range 64 {
		var fd int
		fd, err = unix.Openat2(dirfd, name, &how)
		if err == nil {
			return fd, nil
		}
		if err != unix.EINTR && err != unix.EAGAIN {
			break
		}
	}
	return -1, err
}

// fail maps an errno from resolution or access to the sentinel it means.
func fail(op, p string, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("fsguard: %s %q: %w", op, p, err)
	}
	switch errno {
	case unix.ENOENT:
		return pathError(op, p, ErrNotFound, "")
	case unix.ENOTDIR:
		return pathError(op, p, ErrNotFound, "a path component is not a directory")
	case unix.EXDEV:
		return pathError(op, p, ErrOutside, "")
	case unix.ELOOP:
		return pathError(op, p, ErrSymlink, "")
	case unix.EISDIR:
		return pathError(op, p, ErrIsDir, "")
	case unix.ENAMETOOLONG:
		return pathError(op, p, ErrInvalidPath, "name too long")
	case unix.ENXIO, unix.ENODEV, unix.ETXTBSY:
		return pathError(op, p, ErrNotRegular, "")
	}
	return fmt.Errorf("fsguard: %s %q: %w", op, p, errno)
}

// fileID identifies a file or directory independent of its names.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// protectedIDs resolves every protected entry that exists right now
// (following symbolic links that stay inside the workspace) to its identity.
// Writes refuse a target file or a directory on the target's path with one of
// these identities, so a protected directory or file is also protected under
// any other name: a symbolic link such as .git -> gitdir, a hard link, or a
// case-folding alias. Protected entries that do not exist are covered by the
// lexical check alone.
func (r *Root) protectedIDs() map[fileID]string {
	ids := make(map[fileID]string, len(r.protected))
	for _, p := range r.protected {
		name := strings.Join(p, "/")
		fd, err := openat2(r.fd, name, unix.O_PATH, 0, readResolve)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			ids[idOf(&st)] = name
		}
		unix.Close(fd)
	}
	return ids
}

// checkID refuses a descriptor whose identity is a protected one.
func checkID(op, p string, fd int, ids map[fileID]string) error {
	if len(ids) == 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(op, p, err)
	}
	if name, ok := ids[idOf(&st)]; ok {
		return pathError(op, p, ErrProtected, "it is "+name+" under another name")
	}
	return nil
}

// writeTarget validates a write or edit destination: mode, path, protected.
func (r *Root) writeTarget(op, p string) (string, error) {
	if !r.opts.Writable {
		return "", pathError(op, p, ErrReadOnly, "")
	}
	rel, err := relative(r.path, op, p)
	if err != nil {
		return "", err
	}
	if rel == "." {
		return "", pathError(op, p, ErrIsDir, "")
	}
	if entry, ok := protectedEntry(r.protected, rel); ok {
		return "", pathError(op, p, ErrProtected, "protected path "+entry)
	}
	return rel, nil
}

// openParent walks to the directory holding rel's last segment without
// following any symbolic link, creating missing directories when create is
// set, and refuses a directory on the way that is a protected one. It returns
// an O_PATH descriptor on that directory (close it) and the final segment.
func (r *Root) openParent(op, p, rel string, create bool, ids map[fileID]string) (int, string, error) {
	if err := checkID(op, p, r.fd, ids); err != nil {
		return -1, "", err
	}
	segs := strings.Split(rel, "/")
	dir, base := segs[:len(segs)-1], segs[len(segs)-1]
	cur := r.fd
	closeCur := func() {
		if cur != r.fd {
			unix.Close(cur)
		}
	}
	for _, s := range dir {
		fd, err := openat2(cur, s, unix.O_PATH|unix.O_DIRECTORY, 0, strictResolve)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(cur, s, 0o777); err == nil || errors.Is(err, unix.EEXIST) {
				fd, err = openat2(cur, s, unix.O_PATH|unix.O_DIRECTORY, 0, strictResolve)
			}
		}
		closeCur()
		if err != nil {
			return -1, "", fail(op, p, err)
		}
		cur = fd
		if err := checkID(op, p, cur, ids); err != nil {
			closeCur()
			return -1, "", err
		}
	}
	if cur == r.fd {
		// Hand out a descriptor the caller may close.
		fd, err := openat2(r.fd, ".", unix.O_PATH|unix.O_DIRECTORY, 0, strictResolve)
		if err != nil {
			return -1, "", fail(op, p, err)
		}
		cur = fd
	}
	return cur, base, nil
}

// checkTarget refuses an existing write or edit target that is not a plain,
// singly linked regular file outside the protected set.
func checkTarget(op, p string, st *unix.Stat_t, ids map[fileID]string) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return pathError(op, p, ErrSymlink, "writes never follow or replace symbolic links")
	case unix.S_IFDIR:
		return pathError(op, p, ErrIsDir, "")
	default:
		return pathError(op, p, ErrNotRegular, "")
	}
	if st.Nlink > 1 {
		return pathError(op, p, ErrHardLink, fmt.Sprintf("%d links", st.Nlink))
	}
	if name, ok := ids[idOf(st)]; ok {
		return pathError(op, p, ErrProtected, "it is "+name+" under another name")
	}
	return nil
}

// Read returns up to limit bytes (0 or more than MaxReadBytes means
// MaxReadBytes) of the regular file at p, starting at byte offset. Symbolic
// links are followed only while they stay inside the workspace.
func (r *Root) Read(p string, offset, limit int64) (ReadResult, error) {
	const op = "read"
	if offset < 0 || limit < 0 {
		return ReadResult{}, pathError(op, p, ErrInvalidArgument, "negative offset or limit")
	}
	rel, err := relative(r.path, op, p)
	if err != nil {
		return ReadResult{}, err
	}
	if err := r.acquire(op, p); err != nil {
		return ReadResult{}, err
	}
	defer r.mu.RUnlock()
	// O_NONBLOCK: opening a FIFO must not hang the worker.
	fd, err := openat2(r.fd, rel, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0, readResolve)
	if err != nil {
		return ReadResult{}, fail(op, p, err)
	}
	defer unix.Close(fd)
	st, err := regularFile(op, p, fd)
	if err != nil {
		return ReadResult{}, err
	}
	n := limit
	if n == 0 || n > r.opts.MaxReadBytes {
		n = r.opts.MaxReadBytes
	}
	if offset >= st.Size {
		return ReadResult{Content: []byte{}, Size: st.Size}, nil
	}
	n = min(n, st.Size-offset)
	buf, err := preadFull(fd, make([]byte, n), offset)
	if err != nil {
		return ReadResult{}, fail(op, p, err)
	}
	return ReadResult{Content: buf, Size: st.Size, Truncated: offset+int64(len(buf)) < st.Size}, nil
}

// regularFile fstats fd and refuses anything but a regular file.
func regularFile(op, p string, fd int) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fail(op, p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return &st, nil
	case unix.S_IFDIR:
		return nil, pathError(op, p, ErrIsDir, "")
	}
	return nil, pathError(op, p, ErrNotRegular, "")
}

// preadFull reads into buf from offset until buf is full or the file ends.
func preadFull(fd int, buf []byte, offset int64) ([]byte, error) {
	got := 0
	for got < len(buf) {
		n, err := unix.Pread(fd, buf[got:], offset+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		got += n
	}
	return buf[:got], nil
}

// readBounded reads a whole regular file of at most max bytes.
func readBounded(op, p string, fd int, st *unix.Stat_t, max int64) ([]byte, error) {
	if st.Size > max {
		return nil, pathError(op, p, ErrTooLarge, fmt.Sprintf("%d bytes, limit %d", st.Size, max))
	}
	// One byte more than the size detects a file growing past the cap.
	buf, err := preadFull(fd, make([]byte, min(st.Size+1, max+1)), 0)
	if err != nil {
		return nil, fail(op, p, err)
	}
	if int64(len(buf)) > max {
		return nil, pathError(op, p, ErrTooLarge, fmt.Sprintf("limit %d", max))
	}
	return buf, nil
}

// Write creates or atomically replaces the regular file at p with content,
// creating missing parent directories inside the workspace. It never follows
// a symbolic link, refuses protected paths, files with several hard links and
// non-regular files, keeps an existing file's permission bits (without
// setuid, setgid and sticky) and, where permitted, its owner.
func (r *Root) Write(p string, content []byte) error {
	const op = "write"
	rel, err := r.writeTarget(op, p)
	if err != nil {
		return err
	}
	if int64(len(content)) > r.opts.MaxWriteBytes {
		return pathError(op, p, ErrTooLarge, fmt.Sprintf("%d bytes, limit %d", len(content), r.opts.MaxWriteBytes))
	}
	if err := r.acquire(op, p); err != nil {
		return err
	}
	defer r.mu.RUnlock()
	ids := r.protectedIDs()
	dfd, base, err := r.openParent(op, p, rel, true, ids)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	var existing *unix.Stat_t
	tfd, err := openat2(dfd, base, unix.O_PATH|unix.O_NOFOLLOW, 0, strictResolve)
	switch {
	case err == nil:
		var st unix.Stat_t
		err = unix.Fstat(tfd, &st)
		unix.Close(tfd)
		if err != nil {
			return fail(op, p, err)
		}
		if err := checkTarget(op, p, &st, ids); err != nil {
			return err
		}
		existing = &st
	case !errors.Is(err, unix.ENOENT):
		return fail(op, p, err)
	}
	return replace(op, p, dfd, base, content, existing, r.opts.Sync)
}

// replace writes content to a new temporary file in dfd and renames it over
// base. The temporary file is removed on every failure.
func replace(op, p string, dfd int, base string, content []byte, existing *unix.Stat_t, sync bool) (err error) {
	mode := uint64(0o666) // new files: 0666 less the umask, like any editor
	if existing != nil {
		mode = 0o600 // the final mode is set with fchmod below
	}
	var fd int
	var name string
	for range 8 {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		name = tempPrefix + hex.EncodeToString(rnd[:])
		fd, err = openat2(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, mode, strictResolve)
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return fail(op, p, err)
	}
	closed := false
	defer func() {
		if !closed {
			unix.Close(fd)
		}
		if err != nil {
			unix.Unlinkat(dfd, name, 0)
		}
	}()
	if existing != nil {
		if err = unix.Fchmod(fd, existing.Mode&0o777); err != nil {
			return fail(op, p, err)
		}
		if int(existing.Uid) != os.Geteuid() || int(existing.Gid) != os.Getegid() {
			// Best effort: only root (or the owner, for the group) may.
			_ = unix.Fchown(fd, int(existing.Uid), int(existing.Gid))
		}
	}
	for b := content; len(b) > 0; {
		n, werr := unix.Write(fd, b)
		if werr == unix.EINTR {
			continue
		}
		if werr != nil {
			err = werr
			return fail(op, p, err)
		}
		b = b[n:]
	}
	if sync {
		if err = unix.Fsync(fd); err != nil {
			return fail(op, p, err)
		}
	}
	closed = true
	if err = unix.Close(fd); err != nil {
		return fail(op, p, err)
	}
	if err = unix.Renameat(dfd, name, dfd, base); err != nil {
		return fail(op, p, err)
	}
	return nil
}

// Edit replaces old with new in the regular file at p and writes the result
// atomically, with Write's rules. old must occur exactly once unless
// replaceAll; it returns the number of replacements.
func (r *Root) Edit(p, old, new string, replaceAll bool) (int, error) {
	const op = "edit"
	rel, err := r.writeTarget(op, p)
	if err != nil {
		return 0, err
	}
	if old == "" {
		return 0, pathError(op, p, ErrInvalidArgument, "old text is empty")
	}
	if old == new {
		return 0, pathError(op, p, ErrInvalidArgument, "old and new text are identical")
	}
	if err := r.acquire(op, p); err != nil {
		return 0, err
	}
	defer r.mu.RUnlock()
	ids := r.protectedIDs()
	dfd, base, err := r.openParent(op, p, rel, false, ids)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dfd)
	fd, err := openat2(dfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK, 0, strictResolve)
	if err != nil {
		return 0, fail(op, p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fail(op, p, err)
	}
	if err := checkTarget(op, p, &st, ids); err != nil {
		return 0, err
	}
	data, err := readBounded(op, p, fd, &st, r.opts.MaxReadBytes)
	if err != nil {
		return 0, err
	}
	n := bytes.Count(data, []byte(old))
	switch {
	case n == 0:
		return 0, pathError(op, p, ErrNoMatch, "")
	case n > 1 && !replaceAll:
		return 0, pathError(op, p, ErrAmbiguous, fmt.Sprintf("%d occurrences; make old unique or set replace_all", n))
	}
	if size := int64(len(data)) + int64(n)*(int64(len(new))-int64(len(old))); size > r.opts.MaxWriteBytes {
		return 0, pathError(op, p, ErrTooLarge, fmt.Sprintf("result %d bytes, limit %d", size, r.opts.MaxWriteBytes))
	}
	out := bytes.ReplaceAll(data, []byte(old), []byte(new))
	if err := replace(op, p, dfd, base, out, &st, r.opts.Sync); err != nil {
		return 0, err
	}
	return n, nil
}

// Glob returns the workspace-relative paths of regular files and symbolic
// links (never followed) matching pattern, sorted. Directories are not
// reported, and symbolically linked directories are never entered.
func (r *Root) Glob(pattern string, max int) (GlobResult, error) {
	const op = "glob"
	pats, err := compileGlob(r.path, op, pattern)
	if err != nil {
		return GlobResult{}, err
	}
	max = clampMax(max)
	if err := r.acquire(op, pattern); err != nil {
		return GlobResult{}, err
	}
	defer r.mu.RUnlock()
	start := commonPrefix(pats)
	name := "."
	if len(start) > 0 {
		name = strings.Join(start, "/")
	}
	fd, err := openat2(r.fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0, strictResolve)
	if err != nil {
		// No such directory (or one reached through a link): no match.
		return GlobResult{Paths: []string{}}, nil
	}
	defer unix.Close(fd)
	res := GlobResult{Paths: []string{}}
	w := walker{
		cost:  patternCost(pats),
		enter: func(dir []string) bool { return anyMayContain(pats, dir) },
		visit: func(_ int, _ string, rel []string, typ uint8) bool {
			if (typ != unix.DT_REG && typ != unix.DT_LNK) || !anyMatch(pats, rel) {
				return false
			}
			if len(res.Paths) == max {
				res.Truncated = true
				return true
			}
			res.Paths = append(res.Paths, strings.Join(rel, "/"))
			return false
		},
	}
	w.dir(fd, start, 0)
	res.Truncated = res.Truncated || w.truncated
	slices.Sort(res.Paths)
	return res, nil
}

// Grep searches the regular files under p (the workspace when p is empty)
// for lines matching the RE2 regular expression pattern. When glob is set,
// only files whose name (a glob without "/") or workspace-relative path match
// it are searched. Binary files (a NUL byte early on), files larger than
// MaxReadBytes and symbolic links are skipped; symbolically linked
// directories are not entered. p itself may be a file or a directory and may
// be reached through a link that stays inside the workspace.
func (r *Root) Grep(pattern, p, glob string, max int) (GrepResult, error) {
	const op = "grep"
	shown := p
	if p == "" {
		p, shown = ".", "."
	}
	if pattern == "" || len(pattern) > MaxRegexpBytes {
		return GrepResult{}, pathError(op, shown, ErrInvalidArgument, "pattern must be 1 to 16384 bytes")
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return GrepResult{}, pathError(op, shown, ErrInvalidArgument, err.Error())
	}
	rel, err := relative(r.path, op, p)
	if err != nil {
		return GrepResult{}, err
	}
	var filter []globPattern
	baseOnly := false
	if glob != "" {
		if filter, err = compileGlob(r.path, op, glob); err != nil {
			return GrepResult{}, err
		}
		baseOnly = !strings.Contains(glob, "/")
	}
	max = clampMax(max)
	if err := r.acquire(op, shown); err != nil {
		return GrepResult{}, err
	}
	defer r.mu.RUnlock()
	fd, err := openat2(r.fd, rel, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0, readResolve)
	if err != nil {
		return GrepResult{}, fail(op, shown, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return GrepResult{}, fail(op, shown, err)
	}
	g := grepper{re: re, max: max, limit: r.opts.MaxReadBytes, res: GrepResult{Matches: []GrepMatch{}}}
	var start []string
	if rel != "." {
		start = strings.Split(rel, "/")
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Size > g.limit {
			return GrepResult{}, pathError(op, shown, ErrTooLarge, fmt.Sprintf("%d bytes, limit %d", st.Size, g.limit))
		}
		g.file(fd, &st, rel)
		return g.res, nil
	case unix.S_IFDIR:
	default:
		return GrepResult{}, pathError(op, shown, ErrNotRegular, "")
	}
	w := walker{
		cost:  patternCost(filter),
		enter: func([]string) bool { return true },
		visit: func(dirfd int, name string, relSegs []string, typ uint8) bool {
			if typ != unix.DT_REG {
				return false
			}
			if filter != nil {
				if baseOnly {
					if !anyMatch(filter, []string{name}) {
						return false
					}
				} else if !anyMatch(filter, relSegs) && !anyMatch(filter, relSegs[len(start):]) {
					return false
				}
			}
			ffd, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK, 0, strictResolve)
			if err != nil {
				return false // vanished or swapped for a link: skip
			}
			defer unix.Close(ffd)
			var fst unix.Stat_t
			if unix.Fstat(ffd, &fst) != nil || fst.Mode&unix.S_IFMT != unix.S_IFREG {
				return false
			}
			return g.file(ffd, &fst, strings.Join(relSegs, "/"))
		},
	}
	w.dir(fd, start, 0)
	g.res.Truncated = g.res.Truncated || w.truncated
	return g.res, nil
}

// grepper scans files for one Grep call.
type grepper struct {
	re      *regexp.Regexp
	max     int
	limit   int64 // per-file byte cap
	scanned int64 // bytes scanned so far
	res     GrepResult
}

// file scans one open regular file; it reports whether the search must stop.
func (g *grepper) file(fd int, st *unix.Stat_t, rel string) bool {
	if st.Size > g.limit {
		return false
	}
	if g.scanned+st.Size > MaxGrepBytes {
		g.res.Truncated = true
		return true
	}
	data, err := preadFull(fd, make([]byte, st.Size), 0)
	if err != nil {
		return false
	}
	g.scanned += int64(len(data))
	if bytes.IndexByte(data[:min(len(data), binarySniffBytes)], 0) >= 0 {
		return false
	}
	for line := 1; len(data) > 0; line++ {
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			l, data = data, nil
		}
		l = bytes.TrimSuffix(l, []byte{'\r'})
		if !g.re.Match(l) {
			continue
		}
		if len(g.res.Matches) == g.max {
			g.res.Truncated = true
			return true
		}
		g.res.Matches = append(g.res.Matches, GrepMatch{Path: rel, Line: line, Text: cutText(l)})
	}
	return false
}

// cutText bounds a reported line at a rune boundary.
func cutText(l []byte) string {
	if len(l) <= MaxMatchTextBytes {
		return string(l)
	}
	cut := MaxMatchTextBytes
	for cut > 0 && !utf8.RuneStart(l[cut]) {
		cut--
	}
	return string(l[:cut])
}

// walker is a bounded depth-first walk over directory descriptors, in name
// order, that never follows a symbolic link.
type walker struct {
	// enter reports whether to descend into the directory rel.
	enter func(rel []string) bool
	// visit is called for every non-directory entry with the descriptor of
	// its directory; it returns true to stop the walk. rel is valid only
	// during the call (the walk reuses it for the next entry): a visit
	// that keeps it copies it (every one here joins it into a string).
	visit func(dirfd int, name string, rel []string, typ uint8) bool
	// onDir, if set, is called for every directory entry (with the
	// descriptor of its parent) before enter decides about it.
	onDir func(dirfd int, name string, rel []string)
	// onList, if set, is called with each directory's entries, sorted,
	// before they are visited; complete says the directory was read to its
	// end (no read error, no MaxWalkEntries stop).
	onList func(rel []string, ents []dirent, complete bool)
	// opened, if set, is called with the descriptor of every directory
	// the walk enters, before it reads it, or with the error that kept the
	// walk from opening it; false skips the directory.
	opened func(fd int, rel []string, err error) bool
	// cost is the match work one path segment costs (the total length of
	// the glob patterns consulted per entry), charged against MaxMatchWork.
	cost      int
	work      int
	entries   int
	truncated bool
	stopped   bool
	// buf is readDir's getdents buffer and scratch visit's rel, both
	// reused: a walk of a large tree allocated 32 KiB per directory and a
	// slice per file before, and in a process that has just started
	// every new page of its heap costs a page fault.
	buf     []byte
	scratch []string
}

type dirent struct {
	name string
	typ  uint8
	ino  uint64 // d_ino
}

func (w *walker) dir(fd int, rel []string, depth int) {
	ents, complete := w.readDir(fd)
	if w.onList != nil {
		w.onList(rel, ents, complete)
	}
	for _, e := range ents {
		if w.stopped {
			return
		}
		// The entry's rel has len(rel)+1 segments.
		if w.work += w.cost * (len(rel) + 2); w.work > MaxMatchWork {
			w.truncated, w.stopped = true, true
			return
		}
		typ := e.typ
		if typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			typ = dtype(st.Mode)
		}
		if typ != unix.DT_DIR {
			w.scratch = append(append(w.scratch[:0], rel...), e.name)
			if w.visit(fd, e.name, w.scratch, typ) {
				w.stopped = true
			}
			continue
		}
		// A directory's rel outlives this entry (the walk below it).
		child := append(rel[:len(rel):len(rel)], e.name)
		if w.onDir != nil {
			w.onDir(fd, e.name, child)
		}
		if !w.enter(child) {
			continue
		}
		if depth+1 >= MaxWalkDepth {
			w.truncated = true
			continue
		}
		// A directory swapped for a symbolic link since getdents fails here.
		cfd, err := openat2(fd, e.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, strictResolve)
		if w.opened != nil && !w.opened(cfd, child, err) {
			if err == nil {
				unix.Close(cfd)
			}
			continue
		}
		if err != nil {
			continue
		}
		w.dir(cfd, child, depth+1)
		unix.Close(cfd)
	}
}

// readDir reads a directory's entries (without . and ..), sorted by name,
// counting them against MaxWalkEntries. complete says it read them all.
func (w *walker) readDir(fd int) (ents []dirent, complete bool) {
	if w.buf == nil {
		w.buf = make([]byte, 32<<10)
	}
	buf := w.buf
	malformed := false
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n < 0 {
			break
		}
		if n == 0 {
			complete = true
			break
		}
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				malformed = true
				break
			}
			name := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			typ := buf[off+18]
			ino := binary.NativeEndian.Uint64(buf[off:])
			off += reclen
			if s := string(name); s != "." && s != ".." {
				if w.entries >= MaxWalkEntries {
					w.truncated, w.stopped = true, true
					break
				}
				w.entries++
				ents = append(ents, dirent{s, typ, ino})
			}
		}
		if w.stopped {
			break
		}
	}
	slices.SortFunc(ents, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	return ents, complete && !malformed && !w.stopped
}

// dtype converts a stat mode to a dirent type.
func dtype(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFLNK:
		return unix.DT_LNK
	}
	return dtOther
}

// dtOther is the walk's type for entries that are neither regular files,
// directories nor symbolic links (FIFOs, sockets, devices).
const dtOther = 0xff
