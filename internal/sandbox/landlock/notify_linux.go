package landlock

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"vak/internal/procfs"
)

// The worker starts each command as the leader of a new session and kills a
// timed-out command by its session id, so no process a command starts may
// leave that session. The seccomp filter turns setsid(2) into a user
// notification that the worker itself answers: allowed only for the worker's
// own direct children (the commands it is launching, between fork and exec),
// refused with EPERM for everyone else. No process in the sandbox can make
// the worker its parent, so no command's descendant can pass.

// The supervisor must be another process. The command being launched calls
// setsid in the worker's vfork child, which blocks until the notification
// is answered, while the worker's forking thread is suspended in the kernel
// holding its Go P. A supervisor goroutine in the worker could then wait
// forever for a stop-the-world garbage collection that waits for that
// thread. Stage 1 (with namespaces) or the broker (without) answers
// instead: it receives the listener from stage 2 over a socketpair.

// SupervisorFD is the descriptor on which stage 2 finds the socket to its
// supervisor (the second extra file).
const SupervisorFD = 4

// SupervisorPair returns a connected pair: local stays with the supervisor,
// remote is handed to stage 2 as SupervisorFD.
func SupervisorPair() (local, remote *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("landlock: supervisor socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "supervisor"), os.NewFile(uintptr(fds[1]), "supervised"), nil
}

// Supervise receives stage 2's listener on local and answers setsid
// notifications for the rest of the sandbox's life: allowed only for direct
// children of worker (a pid as this process sees it).
func Supervise(local *os.File, worker int) {
	fd, ok := receiveListener(local)
	if !ok {
		return
	}
	defer unix.Close(fd)
	// Best effort: a kernel without it (before Linux 6.6) refuses the
	// flag, and the hand-off is then an ordinary wake-up, as it always was.
	syncWakeUp(fd)
	superviseSetsid(fd, worker)
}

// receiveListener reads the listener stage 2 sends on local (handOver) and
// closes local. ok is false if stage 2 died before restricting itself.
func receiveListener(local *os.File) (fd int, ok bool) {
	defer local.Close()
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(local.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return -1, false
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, false
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, false
	}
	return fds[0], true
}

// syncWakeUp sets SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on the listener
// (Linux 6.6): the kernel then wakes the supervisor on the CPU of the task
// that notified, and that task on the supervisor's when it is answered. A
// setsid notification is a strict hand-off (the command's fork child waits
// for the answer, the supervisor waits for the next notification), which
// otherwise costs a wake-up on another CPU, often an idle one, each way.
// Older kernels refuse the ioctl (EINVAL).
func syncWakeUp(fd int) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, unix.SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)
	if e != 0 {
		return fmt.Errorf("landlock: seccomp listener: set SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: %w", e)
	}
	return nil
}

// handOver sends the listener to the supervisor and closes it here: the
// worker (and everything it starts) never holds it.
func handOver(listener int) error {
	defer unix.Close(listener)
	var st unix.Stat_t
	if err := unix.Fstat(SupervisorFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("no supervisor socket on fd %d", SupervisorFD)
	}
	defer unix.Close(SupervisorFD)
	if err := unix.Sendmsg(SupervisorFD, []byte("L"), unix.UnixRights(listener), nil, 0); err != nil {
		return fmt.Errorf("hand the seccomp listener to the supervisor: %w", err)
	}
	return nil
}

// seccompNotif and seccompNotifResp mirror struct seccomp_notif and
// struct seccomp_notif_resp (linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// superviseSetsid answers setsid notifications on fd until no process uses
// the filter any more (or the listener fails). parent is the worker's pid.
//
// The listener polls POLLHUP once the filter has no user left (every
// sandboxed process exited and was reaped). Without that check the loop
// would never end: recent kernels (6.18 here) answer RECV on such a filter
// with ENOENT at once, which the loop took for a caller that died and
// retried, at full speed, for as long as the supervising process lived (the
// broker, when there is no stage 1); older ones block RECV for good. The
// poll costs one system call per notification.
func superviseSetsid(fd int, parent int) {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		pfd[0].Revents = 0
		if _, err := unix.Poll(pfd, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			fmt.Fprintf(os.Stderr, "vak: setsid supervisor stopped: %v\n", err)
			return
		}
		switch ev := pfd[0].Revents; {
		case ev&unix.POLLIN != 0:
			// A notification waits: answer it first, even with POLLHUP.
		case ev&unix.POLLHUP != 0:
			return // no process uses the filter any more
		default:
			fmt.Fprintf(os.Stderr, "vak: setsid supervisor stopped: poll events %#x\n", ev)
			return
		}
		var req seccompNotif
		if err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
				continue // interrupted, or the caller died before we read it
			}
			fmt.Fprintf(os.Stderr, "vak: setsid supervisor stopped: %v\n", err)
			return
		}
		allow := int(req.Pid) != 0 && ppidOf(int(req.Pid)) == parent
		id := req.ID
		// The pid might have died and been reused while /proc was read:
		// only trust the answer if the notification is still live.
		if err := ioctl(fd, notifIDValid, unsafe.Pointer(&id)); err != nil {
			continue
		}
		resp := seccompNotifResp{ID: req.ID}
		if allow {
			resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
		} else {
			resp.Error = -int32(unix.EPERM)
		}
		ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	}
}

// ppidOf returns pid's parent (-1 if unknown).
func ppidOf(pid int) int {
	p, err := procfs.Stat(pid)
	if err != nil {
		return -1
	}
	return p.PPID
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}
