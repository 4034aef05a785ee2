//go:build linux || darwin

package interact

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// maxTyped bounds what rawTerminal reads ahead (a terminal holds one line
// of a few KiB; this is many).
const maxTyped = 64 << 10

// rawTerminal puts the terminal fd in raw mode, for a relay to a terminal
// of the command's own, and returns what was typed before and must reach
// the command first, and how to restore the terminal's mode.
//
// A terminal in canonical mode (the usual one) keeps what was typed as
// lines, and its end-of-file character (VEOF, normally ^D) as a mark that
// ends one read with nothing. Switched to raw mode, it gives such a mark
// back as a NUL byte. Whatever hands vak a terminal whose own input has
// ended types ^D at once (`script` does, before vak even runs), so the
// command got a NUL and waited for input for ever instead of getting end of
// file. So VEOF is switched off first (a ^D typed from then on stays a
// byte, which the command's terminal interprets), then the lines and marks
// made so far are read (each mark, and a line it ended, as the line plus
// VEOF: the keys as typed), and only then is the terminal made raw. A line
// not yet ended is kept by the switch and read raw later, like any input.
func rawTerminal(fd int) (typed []byte, restore func(), err error) {
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, nil, fmt.Errorf("terminal: read its mode: %w", err)
	}
	restore = func() { unix.IoctlSetTermios(fd, ioctlSetTermios, old) }
	if old.Lflag&unix.ICANON != 0 && old.Cc[unix.VEOF] != vdisable {
		noEOF := *old
		noEOF.Cc[unix.VEOF] = vdisable
		if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &noEOF); err != nil {
			return nil, nil, fmt.Errorf("terminal: set its mode: %w", err)
		}
		if typed, err = readLines(fd, old); err != nil {
			restore()
			return nil, nil, err
		}
	}
	if _, err := term.MakeRaw(fd); err != nil {
		restore()
		return nil, nil, fmt.Errorf("terminal: raw mode: %w", err)
	}
	return typed, restore, nil
}

// readLines reads, without blocking, what the canonical terminal fd has
// made readable: whole lines, and end-of-file marks (a read of nothing).
// A read that ended without a line end (a mark with text before it, or
// alone) is returned with t's VEOF after it.
func readLines(fd int, t *unix.Termios) ([]byte, error) {
	var typed []byte
	buf := make([]byte, 8<<10)
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for len(typed) < maxTyped {
		pfd[0].Revents = 0
		n, err := unix.Poll(pfd, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("terminal: poll: %w", err)
		}
		if n == 0 || pfd[0].Revents != unix.POLLIN {
			return typed, nil // nothing more (or a hang-up: raw reads see it)
		}
		n, err = unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("terminal: read: %w", err)
		}
		typed = append(typed, buf[:n]...)
		if n == 0 || !lineEnd(buf[n-1], t) {
			typed = append(typed, t.Cc[unix.VEOF])
		}
	}
	return typed, nil
}

// lineEnd says whether c ends a line on a terminal with mode t.
func lineEnd(c byte, t *unix.Termios) bool {
	return c == '\n' || (c != vdisable && (c == t.Cc[unix.VEOL] || c == t.Cc[unix.VEOL2]))
}
