package landlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"vak/internal/paths"
	"vak/internal/sandbox"
)

// mountSpec is one thing to place into the new root.
type mountSpec struct {
	target string // absolute path in the view
	source string // host path to clone; empty for tmpfs
	ro     bool
	file   bool // target is a file (bind of a file)
	fd     int  // detached clone (open_tree), taken before anything is hidden
}

// buildView assembles the sandbox's filesystem on a fresh tmpfs and pivots
// into it. Every source is cloned (open_tree) before the new root is
// mounted anywhere, so sources that the new mounts would hide (a workspace
// under /tmp or HOME) are still reachable.
func buildView(p Policy) error {
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	specs, links, err := viewSpecs(p)
	if err != nil {
		return err
	}
	defer closeSpecs(specs)
	if err := cloneSources(specs); err != nil {
		return err
	}
	// The new root: a tmpfs mounted over the private temp dir (an empty
	// directory that only serves as the mount point).
	root := p.TempDir
	if err := unix.Mount("vak-root", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	if err := placeMounts(p, root, specs); err != nil {
		return err
	}
	for _, l := range links {
		if err := os.Symlink(l[1], filepath.Join(root, l[0])); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("symlink %s: %w", l[0], err)
		}
	}
	finishDev(root)
	if err := mountProc(root); err != nil {
		return err
	}
	if err := mountProtected(p, root); err != nil {
		return err
	}
	return pivotInto(root)
}

// viewSpecs lists the view's mounts, in the order in which mounts of the
// same depth are placed, and the system paths that are symbolic links
// (recreated in the view: target -> link text).
func viewSpecs(p Policy) ([]*mountSpec, [][2]string, error) {
	specs, links, err := systemSpecs(p)
	if err != nil {
		return nil, nil, err
	}
	// HOME is an empty private tmpfs, or the persistent home (AgentHome);
	// a workspace below it is mounted into it.
	if p.UserHome != "" && p.UserHome != "/" {
		specs = append(specs, &mountSpec{target: p.UserHome, source: p.AgentHome})
	} else if p.AgentHome != "" {
		return nil, nil, fmt.Errorf("a persistent home needs a home directory other than / (HOME is %q)", p.UserHome)
	}
	specs = append(specs, &mountSpec{target: p.Workspace, source: p.Workspace, ro: p.Mode != sandbox.WorkspaceWrite})
	specs = append(specs, scratchSpecs()...)
	return append(specs, maskSpecs()...), links, nil
}

// systemSpecs are the host's system paths (read-only), the read and write
// paths of the trusted config, and the fence's trust files.
func systemSpecs(p Policy) ([]*mountSpec, [][2]string, error) {
	var specs []*mountSpec
	var links [][2]string
	sys := p.SystemPaths
	if sys == nil {
		sys = DefaultSystemPaths
	}
	for _, s := range sys {
		fi, err := os.Lstat(s)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			dest, err := os.Readlink(s)
			if err != nil {
				return nil, nil, err
			}
			links = append(links, [2]string{s, dest})
			continue
		}
		specs = append(specs, &mountSpec{target: s, source: s, ro: true})
	}
	for _, s := range p.ReadPaths {
		specs = append(specs, &mountSpec{target: s, source: s, ro: true})
	}
	for _, s := range p.WritePaths {
		specs = append(specs, &mountSpec{target: s, source: s})
	}
	if p.Fence != nil {
		// Public trust files (the gateway CA): read-only, outside /etc so
		// that the masked /etc/vak stays empty.
		specs = append(specs, &mountSpec{target: sandbox.FenceTrustDir, source: p.Fence.TrustDir, ro: true})
	}
	return specs, links, nil
}

// scratchSpecs are the view's private tmpfs mounts (/tmp, /dev, /dev/shm)
// and the device nodes bound into its /dev.
func scratchSpecs() []*mountSpec {
	specs := []*mountSpec{
		// /tmp is a tmpfs of sandbox.limits.tmpfs bytes like HOME and
		// /dev/shm, not a directory on the host's disk.
		{target: "/tmp"},
		{target: "/dev"},
		{target: "/dev/shm"},
	}
	for _, d := range DevNodes {
		if _, err := os.Stat("/dev/" + d); err == nil {
			specs = append(specs, &mountSpec{target: "/dev/" + d, source: "/dev/" + d, file: true})
		}
	}
	return specs
}

// maskSpecs hide the MaskedPaths that exist: an empty read-only tmpfs over
// a directory, /dev/null over a file.
func maskSpecs() []*mountSpec {
	var specs []*mountSpec
	for _, m := range MaskedPaths {
		fi, err := os.Lstat(m)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			continue
		}
		if fi.IsDir() {
			specs = append(specs, &mountSpec{target: m, ro: true})
		} else {
			specs = append(specs, &mountSpec{target: m, source: "/dev/null", ro: true, file: true})
		}
	}
	return specs
}

// cloneSources clones every spec's source (a detached, recursive copy of
// its mounts) and sets its attributes: nosuid, nodev except for device
// nodes, read-only where asked.
func cloneSources(specs []*mountSpec) error {
	for _, s := range specs {
		if s.source == "" {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, s.source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("clone %s: %w", s.source, err)
		}
		s.fd = fd
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if strings.HasPrefix(s.source, "/dev/") {
			attr.Attr_set = unix.MOUNT_ATTR_NOSUID // device nodes (and /dev/null masks) need dev
		}
		if s.ro {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("set attributes of %s: %w", s.source, err)
		}
	}
	return nil
}

// closeSpecs closes the clones that were not mounted.
func closeSpecs(specs []*mountSpec) {
	for _, s := range specs {
		if s.fd > 0 {
			unix.Close(s.fd)
		}
	}
}

// placeMounts mounts every spec into the view at root, shallow targets
// first so that deeper ones land inside them. Once the persistent home is
// mounted, the mounts below it are made through it (mountBeneath).
func placeMounts(p Policy, root string, specs []*mountSpec) error {
	slices.SortStableFunc(specs, func(a, b *mountSpec) int {
		return strings.Count(a.target, "/") - strings.Count(b.target, "/")
	})
	var homeFD = -1 // the view's home, once mounted (AgentHome only)
	defer func() {
		if homeFD >= 0 {
			unix.Close(homeFD)
		}
	}()
	for _, s := range specs {
		if homeFD >= 0 && s.target != p.UserHome && paths.Within(p.UserHome, s.target) {
			// Below the persistent home: its directories are the
			// sandbox's from earlier runs, so a link there must not move
			// this mount (or a directory it creates) onto a host path.
			if err := mountBeneath(homeFD, p.UserHome, s, p.Limits); err != nil {
				return err
			}
			continue
		}
		if err := placeMount(p, root, s); err != nil {
			return err
		}
		if s.target == p.UserHome && p.AgentHome != "" {
			fd, err := unix.Open(filepath.Join(root, s.target), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open the view's home: %w", err)
			}
			homeFD = fd
		}
	}
	return nil
}

// placeMount creates s's mount point in the view at root and mounts s on
// it: its clone, or a tmpfs (mode 1777 for /tmp and /dev/shm, 0700 and
// owned by the invoking user for a fresh home).
func placeMount(p Policy, root string, s *mountSpec) error {
	dst := filepath.Join(root, s.target)
	if s.file {
		if err := makeFileMountPoint(dst); err != nil {
			return fmt.Errorf("create mount point %s: %w", s.target, err)
		}
	} else if err := os.MkdirAll(dst, 0o755); err != nil && !errors.Is(err, unix.EROFS) {
		return fmt.Errorf("create mount point %s: %w", s.target, err)
	}
	if s.source == "" {
		mode := "0755"
		switch {
		case s.target == p.UserHome:
			mode = "0700"
		case s.target == "/dev/shm" || s.target == "/tmp":
			mode = "1777"
		}
		if err := mountTmpfs(dst, s, mode, p.Limits); err != nil {
			return err
		}
		if s.target == p.UserHome {
			os.Chown(dst, 0, 0) // root of the outer user ns = the invoking user
		}
		return nil
	}
	if err := unix.MoveMount(s.fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s on %s: %w", s.source, s.target, err)
	}
	unix.Close(s.fd)
	s.fd = 0
	return nil
}

// mountTmpfs mounts s's tmpfs on dst: sandbox.limits.tmpfs bytes of the
// given mode, or an empty read-only one of 4k when s is read-only (a mask).
func mountTmpfs(dst string, s *mountSpec, mode string, lim sandbox.Limits) error {
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	opts := "mode=" + mode + ",size=" + fmt.Sprint(lim.WithDefaults().TmpfsSize)
	if s.ro {
		flags |= unix.MS_RDONLY
		opts = "mode=0755,size=4k"
	}
	if err := unix.Mount("vak-tmp", dst, "tmpfs", flags, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", s.target, err)
	}
	return nil
}

// finishDev adds the usual links of /dev and a private pty instance (for
// tools that need a terminal; optional) to the view's /dev.
func finishDev(root string) {
	for name, dest := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"} {
		os.Symlink(dest, filepath.Join(root, "dev", name))
	}
	if err := os.MkdirAll(filepath.Join(root, "dev", "pts"), 0o755); err == nil {
		unix.Mount("devpts", filepath.Join(root, "dev", "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
	}
}

// mountProc mounts a fresh /proc in the view: it shows only the sandbox's
// own processes. Inside a container whose /proc is partly masked the kernel
// refuses it; the view then has no /proc at all rather than the host's.
func mountProc(root string) error {
	procDir := filepath.Join(root, "proc")
	if err := os.MkdirAll(procDir, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", procDir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fmt.Fprintf(os.Stderr, "vak: landlock: no /proc in the sandbox: %v\n", err)
	}
	return nil
}

// pivotInto makes the view's root read-only, switches to it and detaches
// the host's root.
func pivotInto(root string) error {
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount root read-only: %w", err)
	}
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

// mountBeneath creates s's mount point below the view's persistent home
// (homeFD, at home in the view) one component at a time without following
// any link, and mounts s on the directory it opened, never by path.
func mountBeneath(homeFD int, home string, s *mountSpec, lim sandbox.Limits) error {
	if s.file {
		return fmt.Errorf("mount %s: a file mount inside the persistent home is not supported", s.target)
	}
	rel, err := filepath.Rel(home, s.target)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("mount %s: not below the home %s", s.target, home)
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	cur, err := unix.Dup(homeFD)
	if err != nil {
		return err
	}
	defer func() { unix.Close(cur) }()
	for _, c := range strings.Split(rel, "/") {
		next, err := -1, error(nil)
		for try := 0; try < 2; try++ {
			if err = unix.Mkdirat(cur, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("create mount point %s in the persistent home: %w", s.target, err)
			}
			if next, err = unix.Openat2(cur, c, &how); err == nil || try > 0 {
				break
			}
			if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
				break
			}
			// A link or a file where a mount point belongs (left by an
			// earlier run): remove that entry itself (unlinkat never
			// follows it) and make the directory.
			if uerr := unix.Unlinkat(cur, c, 0); uerr != nil && !errors.Is(uerr, unix.ENOENT) {
				return fmt.Errorf("create mount point %s in the persistent home: remove the %s in the way: %w", s.target, c, uerr)
			}
		}
		if err != nil {
			return fmt.Errorf("create mount point %s in the persistent home: %w", s.target, err)
		}
		unix.Close(cur)
		cur = next
	}
	if s.source == "" {
		// The magic link names the directory cur holds, not a path.
		return mountTmpfs("/proc/self/fd/"+strconv.Itoa(cur), s, "0755", lim)
	}
	if err := unix.MoveMount(s.fd, "", cur, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s on %s: %w", s.source, s.target, err)
	}
	unix.Close(s.fd)
	s.fd = 0
	return nil
}

// mountProtected binds the pinned directories onto themselves read-write
// and the protected paths read-only, inside the view's workspace. Both the
// source (in the host's workspace) and the target (in the view's) are
// resolved beneath the workspace without following any symbolic link: a
// `.git -> ~/.kube` link planted by an earlier command neither makes a host
// file appear in the view nor moves a mount onto a host path. A path that
// cannot be resolved so is skipped (the tripwire still watches it).
func mountProtected(p Policy, root string) error {
	if p.Mode != sandbox.WorkspaceWrite || len(p.Pin)+len(p.Protected) == 0 {
		return nil
	}
	hostWS, err := unix.Open(p.Workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace %s: %w", p.Workspace, err)
	}
	defer unix.Close(hostWS)
	viewWS, err := unix.Open(filepath.Join(root, p.Workspace), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the view's workspace: %w", err)
	}
	defer unix.Close(viewWS)
	type bind struct {
		rel string
		ro  bool
	}
	var binds []bind
	for _, list := range []struct {
		paths []string
		ro    bool
	}{{p.Pin, false}, {p.Protected, true}} {
		for _, abs := range list.paths {
			rel, err := filepath.Rel(p.Workspace, abs)
			if err != nil || rel == "." || strings.HasPrefix(rel, "../") || rel == ".." {
				return fmt.Errorf("protected path %s is not inside the workspace %s", abs, p.Workspace)
			}
			binds = append(binds, bind{rel, list.ro})
		}
	}
	// Parents first, so deeper mounts land inside them.
	slices.SortStableFunc(binds, func(a, b bind) int {
		return strings.Count(a.rel, "/") - strings.Count(b.rel, "/")
	})
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for _, b := range binds {
		src, err := unix.Openat2(hostWS, b.rel, &how)
		if err != nil {
			continue // gone, or reached through a link: not mounted
		}
		tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
		unix.Close(src)
		if err != nil {
			return fmt.Errorf("clone protected path %s: %w", b.rel, err)
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if b.ro {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			unix.Close(tree)
			return fmt.Errorf("set attributes of protected path %s: %w", b.rel, err)
		}
		dst, err := unix.Openat2(viewWS, b.rel, &how)
		if err != nil {
			unix.Close(tree)
			continue
		}
		err = unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(dst)
		unix.Close(tree)
		if err != nil {
			return fmt.Errorf("mount protected path %s: %w", b.rel, err)
		}
	}
	return nil
}

// makeFileMountPoint makes sure a file exists at dst to mount a file on. An
// existing one is used as it is, without opening it: a non-root user cannot
// open /etc/shadow (mode 0640 root:shadow) of the host's /etc, yet may mount
// /dev/null over it in its own mount namespace. Only a missing one is
// created (mknod of a regular file, which needs no read permission either).
func makeFileMountPoint(dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	err := unix.Mknod(dst, unix.S_IFREG|0o644, 0)
	if err == nil || errors.Is(err, os.ErrExist) {
		return nil
	}
	return err
}
