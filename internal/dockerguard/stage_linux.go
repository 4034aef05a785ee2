package dockerguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// stageBind closes the race between the bind-source check and the
// engine's mount (the agent swapping a workspace directory for a symlink
// after the check): it opens src beneath the workspace without leaving it
// through any symlink or magic link (openat2 RESOLVE_BENEATH), and
// bind-mounts exactly the object it opened, recursively (the session's
// read-only protected paths under it stay read-only), at target (a path in
// the stage directory from reserve), which the caller forwards as the
// source. What the engine mounts is then the object the guard checked,
// whatever the agent renames or swaps afterwards. The stage directory is
// on the sidecar's private tmpfs, which nothing else mounts. A missing
// source of a Binds entry is created as a directory (as the engine would),
// beneath the workspace in the same way.
func (g *Guard) stageBind(target, src string, create bool, field string) error {
	rel, err := filepath.Rel(g.p.Workspace, src)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return deny("%s source %q is outside the workspace %s", field, src, g.p.Workspace)
	}
	root, err := unix.Open(g.p.Workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("dockerguard: open the workspace %s: %w", g.p.Workspace, err)
	}
	defer unix.Close(root)
	fd, err := openBeneath(root, rel, false)
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = mkdirBeneath(root, rel)
	}
	switch {
	case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP):
		return deny("%s source %q leaves the workspace %s through a symlink", field, src, g.p.Workspace)
	case errors.Is(err, unix.ENOENT):
		return deny("%s source %q does not exist", field, src)
	case err != nil:
		return fmt.Errorf("dockerguard: %s source %q: %w", field, src, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("dockerguard: %s source %q: %w", field, src, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(target, 0o700)
	} else {
		err = os.WriteFile(target, nil, 0o600)
	}
	if err != nil {
		return fmt.Errorf("dockerguard: stage %s source %q: %w", field, src, err)
	}
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		os.Remove(target)
		return fmt.Errorf("dockerguard: stage %s source %q at %s: %w", field, src, target, err)
	}
	return nil
}

// openBeneath opens rel (relative to root) as an O_PATH descriptor,
// refusing to leave root through "..", an absolute symlink or a magic link.
func openBeneath(root int, rel string, dir bool) (int, error) {
	flags := uint64(unix.O_PATH | unix.O_CLOEXEC)
	if dir {
		flags |= unix.O_DIRECTORY
	}
	for {
		fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // a concurrent rename: the kernel asks to retry
		}
		return fd, err
	}
}

// mkdirBeneath creates the missing directories of rel beneath root (each
// parent opened beneath root first) and opens the last one.
func mkdirBeneath(root int, rel string) (int, error) {
	parts := strings.Split(rel, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		fd, err := openBeneath(root, prefix, true)
		if err == nil {
			if i == len(parts)-1 {
				return fd, nil
			}
			unix.Close(fd)
			continue
		}
		if !errors.Is(err, unix.ENOENT) {
			return -1, err
		}
		parent := root
		if i > 0 {
			if parent, err = openBeneath(root, strings.Join(parts[:i], "/"), true); err != nil {
				return -1, err
			}
		}
		err = unix.Mkdirat(parent, parts[i], 0o755)
		if parent != root {
			unix.Close(parent)
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		if fd, err = openBeneath(root, prefix, true); err != nil {
			return -1, err
		}
		if i == len(parts)-1 {
			return fd, nil
		}
		unix.Close(fd)
	}
	return -1, unix.ENOENT
}

// prepareStage creates the stage directory (mode 0700).
func prepareStage(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("dockerguard: stage dir: %w", err)
	}
	return nil
}

// unstage unmounts a staged source and removes its mount point.
func unstage(p string) {
	unix.Unmount(p, unix.MNT_DETACH)
	os.Remove(p)
}
