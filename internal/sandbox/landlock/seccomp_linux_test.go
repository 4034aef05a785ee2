package landlock

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData encodes struct seccomp_data for the BPF VM.
func seccompData(arch uint32, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], nr)
	binary.LittleEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

func TestFilterDecisions(t *testing.T) {
	if nativeArch == 0 {
		t.Skip("no filter for this architecture")
	}
	raw, err := filterProgram(false)
	if err != nil {
		t.Fatal(err)
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	for _, tc := range []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"foreign arch (i386 int 0x80) is killed", unix.AUDIT_ARCH_I386, 0, nil, retKill},
		{"x32 ABI refused", nativeArch, x32Bit | uint32(unix.SYS_SOCKET), []uint64{unix.AF_INET}, retENOSYS},
		{"read allowed", nativeArch, unix.SYS_READ, nil, retAllow},
		{"ptrace denied", nativeArch, unix.SYS_PTRACE, nil, retDeny},
		{"io_uring denied", nativeArch, unix.SYS_IO_URING_SETUP, nil, retDeny},
		{"unshare denied", nativeArch, unix.SYS_UNSHARE, nil, retDeny},
		{"clone3 -> ENOSYS", nativeArch, unix.SYS_CLONE3, nil, retENOSYS},
		{"plain clone allowed", nativeArch, unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD)}, retAllow},
		{"thread clone allowed", nativeArch, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, retAllow},
		{"clone NEWUSER denied", nativeArch, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, retDeny},
		{"clone NEWNET with garbage in the high bits denied", nativeArch, unix.SYS_CLONE, []uint64{1<<32 | unix.CLONE_NEWNET}, retDeny},
		{"clone PARENT denied", nativeArch, unix.SYS_CLONE, []uint64{unix.CLONE_PARENT | uint64(unix.SIGCHLD)}, retDeny},
		{"socket AF_UNIX allowed", nativeArch, unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, retAllow},
		{"socket AF_NETLINK allowed", nativeArch, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_DGRAM}, retAllow},
		{"socket AF_INET denied", nativeArch, unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM}, retDeny},
		{"socket AF_INET6 denied", nativeArch, unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_DGRAM}, retDeny},
		{"socket AF_PACKET denied", nativeArch, unix.SYS_SOCKET, []uint64{unix.AF_PACKET, unix.SOCK_RAW}, retDeny},
		{"socket AF_VSOCK denied", nativeArch, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, retDeny},
		{"socket AF_INET with high garbage denied (kernel truncates to int)", nativeArch, unix.SYS_SOCKET, []uint64{1<<32 | unix.AF_INET, unix.SOCK_STREAM}, retDeny},
		{"socket AF_UNIX raw denied", nativeArch, unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_RAW | unix.SOCK_NONBLOCK}, retDeny},
		{"socket AF_NETLINK packet denied", nativeArch, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_PACKET}, retDeny},
		{"socketpair AF_UNIX allowed", nativeArch, unix.SYS_SOCKETPAIR, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"socketpair AF_INET denied", nativeArch, unix.SYS_SOCKETPAIR, []uint64{unix.AF_INET, unix.SOCK_STREAM}, retDeny},
		{"ioctl TIOCSTI denied", nativeArch, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI}, retDeny},
		{"ioctl TIOCLINUX denied", nativeArch, unix.SYS_IOCTL, []uint64{0, unix.TIOCLINUX}, retDeny},
		{"ioctl TCGETS allowed", nativeArch, unix.SYS_IOCTL, []uint64{0, unix.TCGETS}, retAllow},
		{"personality query allowed", nativeArch, unix.SYS_PERSONALITY, []uint64{0xffffffff}, retAllow},
		{"personality ADDR_NO_RANDOMIZE denied", nativeArch, unix.SYS_PERSONALITY, []uint64{0x0040000}, retDeny},
		{"mount denied", nativeArch, unix.SYS_MOUNT, nil, retDeny},
		{"open_by_handle_at denied", nativeArch, unix.SYS_OPEN_BY_HANDLE_AT, nil, retDeny},
		{"fchmod 0755 allowed", nativeArch, unix.SYS_FCHMOD, []uint64{3, 0o755}, retAllow},
		{"fchmod 4755 denied", nativeArch, unix.SYS_FCHMOD, []uint64{3, 0o4755}, retDeny},
		{"fchmod 2755 denied", nativeArch, unix.SYS_FCHMOD, []uint64{3, 0o2755}, retDeny},
		{"fchmod 1777 (sticky) allowed", nativeArch, unix.SYS_FCHMOD, []uint64{3, 0o1777}, retAllow},
		{"fchmod setuid with high garbage denied", nativeArch, unix.SYS_FCHMOD, []uint64{3, 1<<32 | 0o4000}, retDeny},
		{"fchmodat 0644 allowed", nativeArch, unix.SYS_FCHMODAT, []uint64{3, 0, 0o644}, retAllow},
		{"fchmodat 6755 denied", nativeArch, unix.SYS_FCHMODAT, []uint64{3, 0, 0o6755}, retDeny},
		{"fchmodat2 0755 allowed", nativeArch, unix.SYS_FCHMODAT2, []uint64{3, 0, 0o755, 0}, retAllow},
		{"fchmodat2 4755 denied", nativeArch, unix.SYS_FCHMODAT2, []uint64{3, 0, 0o4755, unix.AT_SYMLINK_NOFOLLOW}, retDeny},
		{"setsid goes to the worker's supervisor", nativeArch, unix.SYS_SETSID, nil, retNotify},
	} {
		got := retOf(t, insns, seccompData(tc.arch, tc.nr, tc.args...))
		if got != tc.want {
			t.Errorf("%s: filter returned %#x, want %#x", tc.name, got, tc.want)
		}
	}
	for _, m := range archModeSyscalls {
		if got := retOf(t, insns, seccompData(nativeArch, uint32(m.nr), 0, 0o4755, 0o4755)); got != retDeny {
			t.Errorf("arch mode syscall %d with 4755: filter returned %#x, want deny", m.nr, got)
		}
		if got := retOf(t, insns, seccompData(nativeArch, uint32(m.nr), 0, 0o755, 0o755)); got != retAllow {
			t.Errorf("arch mode syscall %d with 0755: filter returned %#x, want allow", m.nr, got)
		}
	}
}

// TestFilterProxied: with a proxied network, IPv4 and IPv6 sockets are
// allowed (the namespace's fence redirects them); raw, packet and every
// other family stay denied, and so does everything else.
func TestFilterProxied(t *testing.T) {
	if nativeArch == 0 {
		t.Skip("no filter for this architecture")
	}
	raw, err := filterProgram(true)
	if err != nil {
		t.Fatal(err)
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	for _, tc := range []struct {
		name string
		nr   uint32
		args []uint64
		want uint32
	}{
		{"socket AF_INET stream allowed", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, retAllow},
		{"socket AF_INET dgram allowed", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_DGRAM}, retAllow},
		{"socket AF_INET6 stream allowed", unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_STREAM}, retAllow},
		{"socket AF_UNIX still allowed", unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
		{"socket AF_INET raw denied", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_RAW}, retDeny},
		{"socket AF_INET6 raw denied", unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_RAW | unix.SOCK_NONBLOCK}, retDeny},
		{"socket AF_INET packet denied", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_PACKET}, retDeny},
		{"socket AF_PACKET denied", unix.SYS_SOCKET, []uint64{unix.AF_PACKET, unix.SOCK_DGRAM}, retDeny},
		{"socket AF_VSOCK denied", unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, retDeny},
		{"socketpair AF_INET denied", unix.SYS_SOCKETPAIR, []uint64{unix.AF_INET, unix.SOCK_STREAM}, retDeny},
		{"unshare (new netns) denied", unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWNET}, retDeny},
		{"clone NEWNET denied", unix.SYS_CLONE, []uint64{unix.CLONE_NEWNET | uint64(unix.SIGCHLD)}, retDeny},
		{"ptrace denied", unix.SYS_PTRACE, nil, retDeny},
	} {
		if got := retOf(t, insns, seccompData(nativeArch, tc.nr, tc.args...)); got != tc.want {
			t.Errorf("%s: filter returned %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

// retOf interprets a seccomp program over data and returns the constant of
// the RET instruction it reaches (x/net/bpf's VM caps return values to the
// packet length, so this small interpreter follows the same semantics
// without the cap).
func retOf(t *testing.T, prog []bpf.Instruction, data []byte) uint32 {
	t.Helper()
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		switch in := prog[pc].(type) {
		case bpf.LoadAbsolute:
			a = binary.LittleEndian.Uint32(data[in.Off:])
		case bpf.ALUOpConstant:
			if in.Op != bpf.ALUOpAnd {
				t.Fatalf("unexpected ALU op %v", in.Op)
			}
			a &= in.Val
		case bpf.JumpIf:
			var ok bool
			switch in.Cond {
			case bpf.JumpEqual:
				ok = a == in.Val
			case bpf.JumpNotEqual:
				ok = a != in.Val
			case bpf.JumpGreaterOrEqual:
				ok = a >= in.Val
			case bpf.JumpLessThan:
				ok = a < in.Val
			case bpf.JumpGreaterThan:
				ok = a > in.Val
			case bpf.JumpLessOrEqual:
				ok = a <= in.Val
			default:
				t.Fatalf("unexpected jump %v", in.Cond)
			}
			if ok {
				pc += int(in.SkipTrue)
			} else {
				pc += int(in.SkipFalse)
			}
		case bpf.RetConstant:
			return in.Val
		default:
			t.Fatalf("unexpected instruction %#v", in)
		}
	}
	t.Fatal("program fell off the end")
	return 0
}
