package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// notifyFloorSupported says whether the floor with vak's session tracking
// runs here (startNotifyFloor).
const notifyFloorSupported = true

// notifySetsid loads, on every thread of this process, a seccomp filter
// that turns setsid into a user notification and allows everything else,
// and sends its listener on descriptor fd the way the landlock backend's
// stage 2 does (a one-byte message carrying it), for landlock.Supervise to
// answer. It is the bench's own filter, not a boundary: it gives the warm
// floor the one step of the landlock backend's session tracking that a
// command's start cannot skip (see notify_linux.go there), and nothing of
// its denylist.
func notifySetsid(fd int) error {
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SETSID, SkipFalse: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_USER_NOTIF},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	})
	if err != nil {
		return err
	}
	filters := make([]unix.SockFilter, len(prog))
	for i, r := range prog {
		filters[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH | unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	listener, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC|NEW_LISTENER): %w", errno)
	}
	defer unix.Close(int(listener))
	if err := unix.Sendmsg(fd, []byte("L"), unix.UnixRights(int(listener)), nil, 0); err != nil {
		return fmt.Errorf("hand the listener to the supervisor: %w", err)
	}
	return nil
}

// intoCgroup makes the command start in the cgroup of descriptor fd
// (clone3 with CLONE_INTO_CGROUP).
func intoCgroup(attr *syscall.SysProcAttr, fd int) {
	attr.UseCgroupFD, attr.CgroupFD = true, fd
}

// floorCgroup makes a cgroup v2 directory for the floor whose commands
// each start in a cgroup (startCgroupFloor), under the first cgroup2
// mount: on this machine kind, a hybrid host, /sys/fs/cgroup/unified. It
// needs no controller: cgroup.kill and CLONE_INTO_CGROUP are the
// hierarchy's own. ok is false where none can be made here (no cgroup2
// mount, or not root and nothing delegated); remove removes it.
func floorCgroup() (dir string, remove func(), ok bool) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", nil, false
	}
	for line := range strings.Lines(string(mounts)) {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "cgroup2" {
			continue
		}
		dir = filepath.Join(f[1], "vak-bench-floor-"+strconv.Itoa(os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", nil, false
		}
		return dir, func() { os.Remove(dir) }, true
	}
	return "", nil, false
}
