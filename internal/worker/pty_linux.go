package worker

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"vak/internal/worker/wire"
)

// tiocgptpeer is TIOCGPTPEER (_IO('T', 0x41), the same on every Linux
// architecture vak builds for): it opens a master's slave without a path
// lookup, so it is the slave of this devpts instance even in a mount
// namespace (Linux 4.13).
const tiocgptpeer = 0x5441

// openPTY opens a new pseudo-terminal pair of this mount namespace's devpts
// (inside the landlock sandbox: the view's private instance). The master is
// non-blocking so that closing it ends a pending read.
func openPTY() (master, slave *os.File, err error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(m)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), tiocgptpeer, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		if !errors.Is(errno, unix.EINVAL) && !errors.Is(errno, unix.ENOTTY) {
			unix.Close(m)
			return nil, nil, fmt.Errorf("open pty slave: %w", errno)
		}
		// Kernels before 4.13: by number.
		n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
		if err != nil {
			unix.Close(m)
			return nil, nil, fmt.Errorf("pty number: %w", err)
		}
		fd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			unix.Close(m)
			return nil, nil, fmt.Errorf("open pty slave: %w", err)
		}
		s = uintptr(fd)
	}
	return os.NewFile(uintptr(m), "/dev/ptmx"), os.NewFile(s, "pty"), nil
}

// setWinsize sets the terminal size of the pty whose master is f.
func setWinsize(f *os.File, sz wire.TTYSize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Rows, Col: sz.Cols})
	})
	if err != nil {
		return err
	}
	return ierr
}

// eofChar is the terminal's end-of-file character (VEOF, normally ^D).
func eofChar(f *os.File) byte {
	rc, err := f.SyscallConn()
	if err != nil {
		return 4
	}
	c := byte(4)
	rc.Control(func(fd uintptr) {
		if t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS); err == nil && t.Cc[unix.VEOF] != 0 {
			c = t.Cc[unix.VEOF]
		}
	})
	return c
}
