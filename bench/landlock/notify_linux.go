package main

import (
	"fmt"
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
