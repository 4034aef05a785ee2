package landlock

import (
	"errors"
	"fmt"
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

// allowedFamilies are the only socket families a sandboxed process may
// create: local IPC (UNIX) and netlink (harmless without capabilities, and
// confined to the sandbox's own network namespace). No AF_INET, AF_INET6,
// AF_PACKET, AF_VSOCK, ...
var allowedFamilies = []uint32{unix.AF_UNIX, unix.AF_NETLINK}

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
func filterProgram() ([]bpf.RawInstruction, error) {
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
	// clone3 hides its flags in memory; make libc fall back to clone.
	prog = append(prog, match(unix.SYS_CLONE3, bpf.RetConstant{Val: retENOSYS})...)
	// clone: no new namespaces (flags are argument 0 on every arch we build).
	prog = append(prog, match(unix.SYS_CLONE,
		bpf.LoadAbsolute{Off: argLo(0), Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: nsFlags},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retDeny},
	)...)
	// socket: only allowed families, never raw or packet types.
	sock := []bpf.Instruction{bpf.LoadAbsolute{Off: argLo(0), Size: 4}}
	for i, fam := range allowedFamilies {
		// On a match jump to the type check, which follows the family tests.
		sock = append(sock, bpf.JumpIf{Cond: bpf.JumpEqual, Val: fam, SkipTrue: uint8(len(allowedFamilies) - i)})
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

// noSetsidProgram denies setsid (installed by the exec shim, in each command,
// after it became a session leader).
func noSetsidProgram() ([]bpf.RawInstruction, error) {
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nativeArch, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	prog = append(prog, match(unix.SYS_SETSID, bpf.RetConstant{Val: retDeny})...)
	prog = append(prog, bpf.RetConstant{Val: retAllow})
	return bpf.Assemble(prog)
}

func installNoSetsid() error {
	raw, err := noSetsidProgram()
	if err != nil {
		return err
	}
	return loadFilter(raw)
}

// installSeccomp loads the filter on every thread of the process (TSYNC).
// no_new_privs must already be set.
func installSeccomp() error {
	raw, err := filterProgram()
	if err != nil {
		return err
	}
	return loadFilter(raw)
}

func loadFilter(raw []bpf.RawInstruction) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	filters := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filters[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	r, _, errno := syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC): %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("seccomp: thread %d could not be synchronised", r)
	}
	return nil
}
