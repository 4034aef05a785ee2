package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unixConnect dials a UNIX socket by path.
func unixConnect(path string) error {
	c, err := net.DialTimeout("unix", path, 3*time.Second)
	if err != nil {
		return err
	}
	c.Close()
	fmt.Println("OK connected", path)
	return nil
}

// attempt tries one kernel operation a sandbox must refuse and reports the
// errno. Success of the operation is the failure of the sandbox.
func attempt(name string) error {
	var err error
	switch name {
	case "socket-inet":
		err = sock(unix.AF_INET, unix.SOCK_STREAM)
	case "socket-inet6":
		err = sock(unix.AF_INET6, unix.SOCK_DGRAM)
	case "socket-packet":
		err = sock(unix.AF_PACKET, unix.SOCK_RAW)
	case "socket-raw":
		err = sock(unix.AF_INET, unix.SOCK_RAW)
	case "socket-vsock":
		err = sock(unix.AF_VSOCK, unix.SOCK_STREAM)
	case "socket-unix-raw":
		err = sock(unix.AF_UNIX, unix.SOCK_RAW)
	case "socket-unix": // control: must work
		err = sock(unix.AF_UNIX, unix.SOCK_STREAM)
	case "ptrace-parent":
		_, _, e := syscall.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_ATTACH, uintptr(os.Getppid()), 0)
		err = errnoErr(e)
	case "io_uring":
		var params [120]byte
		_, _, e := syscall.RawSyscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params[0])), 0)
		err = errnoErr(e)
	case "unshare-user":
		err = unix.Unshare(unix.CLONE_NEWUSER)
	case "unshare-net":
		err = unix.Unshare(unix.CLONE_NEWNET)
	case "clone-newuser":
		_, _, e := syscall.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		err = errnoErr(e)
	case "clone-parent":
		// A sibling of this process: it exits at once, like a fork child.
		pid, _, e := syscall.RawSyscall6(unix.SYS_CLONE, unix.CLONE_PARENT|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		if e == 0 && pid == 0 {
			syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		err = errnoErr(e)
	case "mount":
		err = unix.Mount("none", "/tmp", "tmpfs", 0, "")
	case "setsid":
		_, err = unix.Setsid()
	case "keyctl":
		_, _, e := syscall.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
		err = errnoErr(e)
	case "bpf":
		_, _, e := syscall.RawSyscall(unix.SYS_BPF, 0, 0, 0)
		err = errnoErr(e)
	case "tiocsti":
		c := byte('x')
		err = unix.IoctlSetPointerInt(0, unix.TIOCSTI, int(c))
	case "personality":
		_, _, e := syscall.RawSyscall(unix.SYS_PERSONALITY, 0x0040000, 0, 0) // ADDR_NO_RANDOMIZE
		err = errnoErr(e)
	case "chroot":
		err = unix.Chroot("/tmp")
	case "open-by-handle":
		_, _, e := syscall.RawSyscall(unix.SYS_OPEN_BY_HANDLE_AT, 0, 0, 0)
		err = errnoErr(e)
	default:
		f, ok := setuidAttempts[name]
		if !ok {
			return fmt.Errorf("unknown attempt %q", name)
		}
		err = f(name)
	}
	if err != nil {
		return err
	}
	fmt.Println("OK", name, "succeeded")
	return nil
}

// setsidBeat leaves its session from a thread that is not the process's
// first (the session it makes is its process's, named by the process's
// pid, not by the thread's id), says so, and then writes the time into
// file every 50 ms for ever.
func setsidBeat(file string) error {
	// The first thread stays with this goroutine: the other one runs on
	// another thread.
	runtime.LockOSThread()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // this thread ends with the goroutine
		if unix.Gettid() == unix.Getpid() {
			errc <- errors.New("setsid-beat: running on the first thread")
			return
		}
		_, err := unix.Setsid()
		errc <- err
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("setsid: %w", err)
	}
	if sid, err := unix.Getsid(0); err != nil || sid != os.Getpid() {
		return fmt.Errorf("session %d (%v) after setsid, want %d", sid, err, os.Getpid())
	}
	fmt.Println("OWN SESSION", os.Getpid())
	for {
		if err := os.WriteFile(file, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sock(domain, typ int) error {
	fd, err := unix.Socket(domain, typ, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// chmodVia sets file's mode (octal) through one of the mode-changing
// syscalls, so a sandbox test covers each of them rather than only the one
// chmod(1) happens to use.
func chmodVia(via, modeStr, file string) error {
	mode, err := strconv.ParseUint(modeStr, 8, 32)
	if err != nil {
		return fmt.Errorf("%w: mode %q is not octal", errUsage, modeStr)
	}
	path := bytePtr(file)
	dirfd := unix.AT_FDCWD
	switch via {
	case "chmod":
		if sysChmod < 0 {
			return fmt.Errorf("%w: this architecture has no chmod(2); use fchmodat", errUsage)
		}
		_, _, e := syscall.Syscall(uintptr(sysChmod), uintptr(unsafe.Pointer(path)), uintptr(mode), 0)
		err = errnoErr(e)
	case "fchmod":
		var f *os.File
		if f, err = os.Open(file); err == nil {
			_, _, e := syscall.Syscall(unix.SYS_FCHMOD, f.Fd(), uintptr(mode), 0)
			err = errnoErr(e)
			f.Close()
		}
	case "fchmodat":
		_, _, e := syscall.Syscall6(unix.SYS_FCHMODAT, uintptr(dirfd), uintptr(unsafe.Pointer(path)), uintptr(mode), 0, 0, 0)
		err = errnoErr(e)
	case "fchmodat2":
		_, _, e := syscall.Syscall6(unix.SYS_FCHMODAT2, uintptr(dirfd), uintptr(unsafe.Pointer(path)), uintptr(mode), 0, 0, 0)
		err = errnoErr(e)
	default:
		return fmt.Errorf("%w: chmod via %q (chmod, fchmod, fchmodat, fchmodat2)", errUsage, via)
	}
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", via, modeStr, file, err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	fmt.Printf("OK %s mode=%o\n", via, uint32(fi.Mode().Perm())|setIDBits(fi.Mode()))
	return nil
}

func setIDBits(m os.FileMode) uint32 {
	var b uint32
	if m&os.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

func bytePtr(s string) *byte {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		return nil
	}
	return p
}
