package landlock

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The worker starts each command as the leader of a new session and kills a
// timed-out command by its session id, so no process a command starts may
// leave that session. The seccomp filter turns setsid(2) into a user
// notification that the worker itself answers: allowed only for the worker's
// own direct children (the commands it is launching, between fork and exec),
// refused with EPERM for everyone else. No process in the sandbox can make
// the worker its parent, so no command's descendant can pass.

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

// superviseSetsid answers setsid notifications on fd until it fails (the
// process exits). parent is the worker's pid.
func superviseSetsid(fd int, parent int) {
	for {
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

// ppidOf reads the parent pid from /proc/PID/stat (-1 if unknown).
func ppidOf(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return -1
	}
	p, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return p
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}
