package interact

import (
	"bytes"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"vak/internal/worker/wire"
)

// DefaultSize is the terminal size when vak's own output is no terminal.
var DefaultSize = wire.TTYSize{Rows: 24, Cols: 80}

// TermFd returns the descriptor of f if it is a terminal.
func TermFd(f any) (int, bool) {
	osf, ok := f.(*os.File)
	if !ok {
		return 0, false
	}
	fd := int(osf.Fd())
	return fd, term.IsTerminal(fd)
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f any) bool {
	_, ok := TermFd(f)
	return ok
}

// Size is the size of the first of files that is a terminal (vak's stdout,
// then its stdin), or DefaultSize when none is one.
func Size(files ...any) wire.TTYSize {
	for _, f := range files {
		if fd, ok := TermFd(f); ok {
			if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
				return wire.TTYSize{Rows: uint16(h), Cols: uint16(w)}
			}
		}
	}
	return DefaultSize
}

// Relay is vak's side of a command's own terminal: vak's terminal (if its
// stdin is one) in raw mode, relayed to the command's.
type Relay struct {
	// Stdin is the command's input: what was typed before raw mode, then
	// vak's stdin.
	Stdin io.Reader
	// Size is the terminal's size at the start; Resize carries its
	// changes.
	Size   wire.TTYSize
	Resize <-chan wire.TTYSize
	// Stop stops following the size and restores the terminal's mode.
	Stop func()
}

// StartRelay starts relaying vak's terminal (stdin in, stdout out) to a
// command's own: every key, Ctrl-C included, goes to the command's terminal
// (see rawTerminal), and its size follows the user's.
func StartRelay(in io.Reader, out any) (*Relay, error) {
	size := func() wire.TTYSize { return Size(out, in) }
	r := &Relay{Stdin: in, Size: size()}
	restore := func() {}
	if fd, ok := TermFd(in); ok {
		typed, rs, err := rawTerminal(fd)
		if err != nil {
			return nil, err
		}
		restore = rs
		if len(typed) > 0 {
			r.Stdin = io.MultiReader(bytes.NewReader(typed), in)
		}
	}
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	resize := make(chan wire.TTYSize, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-winch:
				select {
				case resize <- size():
				case <-done:
					return
				}
			}
		}
	}()
	r.Resize = resize
	r.Stop = func() {
		signal.Stop(winch)
		close(done)
		restore()
	}
	return r, nil
}
