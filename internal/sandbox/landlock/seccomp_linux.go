package landlock

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter is a denylist over the native syscall ABI, closed at
// both ends: a syscall from any other ABI (i386 via int 0x80 on amd64) kills
// the process, and x32 syscalls fail with ENOSYS. Landlock and the view are
// the allowlist; seccomp removes the kernel surface that could undo them or
// reach the network.

// errnoDeny is the errno denied calls fail with.
const errnoDeny = unix.EPERM

// deniedSyscalls fail with EPERM whatever their arguments.
var deniedSyscalls = append([]uintptr{
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
	unix.SYS_QUOTACTL, unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_SYSLOG, unix.SYS_VHANGUP, unix.SYS_KCMP, unix.SYS_PIDFD_GETFD,
	unix.SYS_FANOTIFY_INIT, unix.SYS_LOOKUP_DCOOKIE,
}, archDenied...)

// nsFlags are the clone flags that create namespaces.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// deniedCloneFlags are the clone flags a sandboxed process may not use:
// nsFlags, and CLONE_PARENT, which would make a command's process a child
// of the worker, which the setsid supervisor takes for a command being
// launched (its session would not be counted as the command's, and would
// escape the command's kill; see notify_linux.go).
const deniedCloneFlags = nsFlags | unix.CLONE_PARENT

// allowedFamilies are the only socket families a sandboxed process may
// create: local IPC (UNIX) and netlink (harmless without capabilities, and
// confined to the sandbox's own network namespace). No AF_INET, AF_INET6,
// AF_PACKET, AF_VSOCK, ...
var allowedFamilies = []uint32{unix.AF_UNIX, unix.AF_NETLINK}

// proxiedFamilies are added with a proxied network (the fence in the
// sandbox's namespace sends every connection to the gateway; raw and
// packet sockets stay denied).
var proxiedFamilies = []uint32{unix.AF_INET, unix.AF_INET6}

// modeArg names a syscall that sets a file's mode and the argument that
// holds the mode.
type modeArg struct {
	nr  uintptr
	arg int
}

// modeSyscalls may not set S_ISUID or S_ISGID: when vak runs as root the
// command is host uid 0 inside its user namespace, so a setuid copy of a
// shell in the workspace would be a setuid-root binary on the host (and a
// non-root user's one would hand that user to anyone who runs it). The mode
// is a plain register on every one of them. A file created with such a
// mode (open, mknod) loses the bits on its first write, as its writer holds
// no CAP_FSETID.
var modeSyscalls = append([]modeArg{
	{unix.SYS_FCHMOD, 1}, {unix.SYS_FCHMODAT, 2}, {unix.SYS_FCHMODAT2, 2},
}, archModeSyscalls...)

// setIDBits are the mode bits modeSyscalls may not set.
const setIDBits = unix.S_ISUID | unix.S_ISGID

// deniedIoctls would let a process inject input into the controlling
// terminal of whoever runs vak (TIOCSTI) or poke the console (TIOCLINUX).
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // args[i] low 32 bits at 16+8i (little-endian)
)

func argLo(i int) uint32 { return uint32(offArg0 + 8*i) }

const (
	retNotify = unix.SECCOMP_RET_USER_NOTIF
	retAllow  = unix.SECCOMP_RET_ALLOW
	retDeny   = unix.SECCOMP_RET_ERRNO | uint32(errnoDeny)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
)

// block is a run of instructions that starts with "A == nr?" and, when the
// syscall matches, ends in a return on every path.
type block []bpf.Instruction

// match wraps body: if A (the syscall number) is nr run body, else skip it.
func match(nr uintptr, body ...bpf.Instruction) block {
	return append(block{bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: uint8(len(body))}}, body...)
}

// filterProgram assembles the filter for the native architecture.
func filterProgram(proxied bool) ([]bpf.RawInstruction, error) {
	families := allowedFamilies
	if proxied {
		families = append(slices.Clone(allowedFamilies), proxiedFamilies...)
	}
	if nativeArch == 0 {
		return nil, errors.New("seccomp filter not implemented for this architecture")
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nativeArch, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if x32Bit != 0 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: retENOSYS})
	}
	for _, nr := range deniedSyscalls {
		prog = append(prog, match(nr, bpf.RetConstant{Val: retDeny})...)
	}
	// setsid goes to the supervisor, which records the session it makes
	// (see notify_linux.go).
	prog = append(prog, match(unix.SYS_SETSID, bpf.RetConstant{Val: retNotify})...)
	// clone3 hides its flags in memory; make libc fall back to clone.
	prog = append(prog, match(unix.SYS_CLONE3, bpf.RetConstant{Val: retENOSYS})...)
	// clone: no new namespaces, no sibling (flags are argument 0 on every
	// arch we build).
	prog = append(prog, match(unix.SYS_CLONE,
		bpf.LoadAbsolute{Off: argLo(0), Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: deniedCloneFlags},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retDeny},
	)...)
	// chmod and friends: never a setuid or setgid bit.
	for _, m := range modeSyscalls {
		prog = append(prog, match(m.nr,
			bpf.LoadAbsolute{Off: argLo(m.arg), Size: 4},
			bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: setIDBits},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
			bpf.RetConstant{Val: retAllow},
			bpf.RetConstant{Val: retDeny},
		)...)
	}
	// socket: only allowed families, never raw or packet types.
	sock := []bpf.Instruction{bpf.LoadAbsolute{Off: argLo(0), Size: 4}}
	for i, fam := range families {
		// On a match jump to the type check, which follows the family tests.
		sock = append(sock, bpf.JumpIf{Cond: bpf.JumpEqual, Val: fam, SkipTrue: uint8(len(families) - i)})
	}
	sock = append(sock,
		bpf.RetConstant{Val: retDeny},
		bpf.LoadAbsolute{Off: argLo(1), Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SOCK_RAW, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SOCK_PACKET, SkipTrue: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retDeny},
	)
	prog = append(prog, match(unix.SYS_SOCKET, sock...)...)
	prog = append(prog, match(unix.SYS_SOCKETPAIR,
		bpf.LoadAbsolute{Off: argLo(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_UNIX, SkipFalse: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retDeny},
	)...)
	ioc := []bpf.Instruction{bpf.LoadAbsolute{Off: argLo(1), Size: 4}}
	for i, req := range deniedIoctls {
		ioc = append(ioc, bpf.JumpIf{Cond: bpf.JumpEqual, Val: req, SkipTrue: uint8(len(deniedIoctls) - i)})
	}
	ioc = append(ioc, bpf.RetConstant{Val: retAllow}, bpf.RetConstant{Val: retDeny})
	prog = append(prog, match(unix.SYS_IOCTL, ioc...)...)
	// personality: reading it and PER_LINUX only (no ADDR_NO_RANDOMIZE etc.).
	prog = append(prog, match(unix.SYS_PERSONALITY,
		bpf.LoadAbsolute{Off: argLo(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0xffffffff, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retDeny},
	)...)
	prog = append(prog, bpf.RetConstant{Val: retAllow})
	return bpf.Assemble(prog)
}

// installSeccomp loads the filter on every thread of the process (TSYNC)
// and returns the user-notification listener for setsid. no_new_privs must
// already be set. proxied allows IPv4 and IPv6 sockets.
func installSeccomp(proxied bool) (int, error) {
	raw, err := filterProgram(proxied)
	if err != nil {
		return -1, err
	}
	return loadFilter(raw)
}

func loadFilter(raw []bpf.RawInstruction) (int, error) {
	filters := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filters[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	// TSYNC_ESRCH lets TSYNC combine with NEW_LISTENER: a failure to
	// synchronise is then reported as ESRCH instead of a thread id.
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_TSYNC | unix.SECCOMP_FILTER_FLAG_TSYNC_ESRCH | unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	fd, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return -1, fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC|NEW_LISTENER): %w", errno)
	}
	return int(fd), nil
}
