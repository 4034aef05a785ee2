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

// endOfInput is what ends the input of the terminal whose master is f when
// last was the last byte typed into it (typed is false if none was): its
// end-of-file character (VEOF, normally ^D), which ends a read with
// nothing at the start of a line, twice after a line not yet ended (the
// first only hands that line over). This is what a user types; a command
// that set its terminal raw reads the keys and decides.
func endOfInput(f *os.File, last byte, typed bool) []byte {
	t := termios(f)
	eof := byte(4)
	if t != nil && t.Cc[unix.VEOF] != 0 {
		eof = t.Cc[unix.VEOF]
	}
	ended := !typed || last == '\n' || last == eof
	if t != nil {
		ended = ended || (last == '\r' && t.Iflag&unix.ICRNL != 0 && t.Iflag&unix.IGNCR == 0) ||
			(last != 0 && (last == t.Cc[unix.VEOL] || last == t.Cc[unix.VEOL2]))
	}
	if ended {
		return []byte{eof}
	}
	return []byte{eof, eof}
}

// termios is the mode of the terminal whose master is f (nil if unknown).
func termios(f *os.File) *unix.Termios {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	var t *unix.Termios
	rc.Control(func(fd uintptr) {
		t, _ = unix.IoctlGetTermios(int(fd), unix.TCGETS)
	})
	return t
}

// setRawInput makes the input side of the terminal slave raw, as
// cfmakeraw(3) does (no line editing, echo, signal keys or input
// translation), and leaves its output as it is: what a command writes
// before it sets the terminal raw itself still ends its lines as on a
// terminal.
func setRawInput(slave *os.File) error {
	rc, err := slave.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		var t *unix.Termios
		if t, ierr = unix.IoctlGetTermios(int(fd), unix.TCGETS); ierr != nil {
			return
		}
		t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
		ierr = unix.IoctlSetTermios(int(fd), unix.TCSETS, t)
	})
	if err != nil {
		return err
	}
	return ierr
}

// winchForeground sends SIGWINCH to the foreground process group of the
// pty whose master is f, if it has one (not this process's own group).
func winchForeground(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	pgrp := 0
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		pgrp, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP)
	}); err != nil {
		return err
	}
	if ierr != nil {
		return ierr
	}
	if pgrp <= 1 || pgrp == unix.Getpgrp() {
		return fmt.Errorf("terminal foreground group %d: not the command's", pgrp)
	}
	return unix.Kill(-pgrp, unix.SIGWINCH)
}
