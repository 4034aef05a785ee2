package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"vak/internal/broker"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// stdinFlags are -i and -t of vak run.
type stdinFlags struct {
	interactive bool
	tty         bool
	ttySet      bool // -t was given (true or false); otherwise automatic
}

// defaultTTYSize is the terminal size when vak's own output is no terminal.
var defaultTTYSize = wire.TTYSize{Rows: 24, Cols: 80}

// termFd returns the descriptor of f if it is a terminal.
func termFd(f any) (int, bool) {
	osf, ok := f.(*os.File)
	if !ok {
		return 0, false
	}
	fd := int(osf.Fd())
	return fd, term.IsTerminal(fd)
}

// termSize is the size of vak's terminal (its stdout's, else its
// stdin's), or defaultTTYSize when neither is one.
func (a *app) termSize() wire.TTYSize {
	for _, f := range []any{a.stdio.Out, a.stdio.In} {
		if fd, ok := termFd(f); ok {
			if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
				return wire.TTYSize{Rows: uint16(h), Cols: uint16(w)}
			}
		}
	}
	return defaultTTYSize
}

// ttyRelay is vak's side of a command's own terminal: vak's terminal (if
// its stdin is one) in raw mode, relayed to the command's.
type ttyRelay struct {
	// stdin is the command's input: what was typed before raw mode, then
	// vak's stdin.
	stdin io.Reader
	// size is the terminal's size at the start; resize carries its
	// changes.
	size   wire.TTYSize
	resize <-chan wire.TTYSize
	// stop stops following the size and restores the terminal's mode.
	stop func()
}

// relayTerminal starts relaying vak's terminal to a command's own: every
// key, Ctrl-C included, goes to the command's terminal (see rawTerminal),
// and its size follows the user's.
func (a *app) relayTerminal() (*ttyRelay, error) {
	r := &ttyRelay{stdin: a.stdio.In, size: a.termSize()}
	restore := func() {}
	if fd, ok := termFd(a.stdio.In); ok {
		typed, rs, err := rawTerminal(fd)
		if err != nil {
			return nil, err
		}
		restore = rs
		if len(typed) > 0 {
			r.stdin = io.MultiReader(bytes.NewReader(typed), a.stdio.In)
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
				case resize <- a.termSize():
				case <-done:
					return
				}
			}
		}
	}()
	r.resize = resize
	r.stop = func() {
		signal.Stop(winch)
		close(done)
		restore()
	}
	return r, nil
}

// interactiveMode says whether vak run runs its command interactively
// (interactiveBash) and on a terminal (tty).
func (a *app) interactiveMode(b sandbox.Backend, f stdinFlags) (tty, interactive bool) {
	_, inTerm := termFd(a.stdio.In)
	_, outTerm := termFd(a.stdio.Out)
	tty = inTerm && outTerm && sandbox.CheckInteractive(b) == nil
	if f.ttySet {
		tty = f.tty
	}
	return tty, tty || f.interactive
}

// interactiveBash runs req as an interactive command when -i or -t ask for
// it (-t by default when stdin and stdout are terminals, like docker run
// -it): stdin is forwarded, and on a terminal the user's terminal is put in
// raw mode (every key, Ctrl-C included, goes to the command's own terminal
// inside the sandbox), its size follows the user's, and its mode is
// restored when the command ends, whichever way. ok is false when neither
// applies (or -t is only the default and backend b runs no interactive
// commands); the caller then runs req as before.
//
// The first SIGINT vak receives while the command runs is forwarded to it
// (ir.arm); a second one, or SIGTERM or SIGHUP, tears the run down. With a
// terminal Ctrl-C is a byte typed into the command's terminal, which sends
// its foreground process group SIGINT there: vak gets no signal at all.
func (a *app) interactiveBash(ctx context.Context, b sandbox.Backend, sess *broker.Session, req wire.BashArgs, f stdinFlags, ir *interrupts, onOutput func(string, []byte)) (res *wire.BashResult, ok bool, err error) {
	tty, interactive := a.interactiveMode(b, f)
	if !interactive {
		return nil, false, nil
	}
	in := broker.Interaction{Stdin: a.stdio.In}
	req.Interactive = true
	// The command replaces the worker's sh -c, so that it alone is in the
	// terminal's foreground process group: Ctrl-C interrupts it (and what
	// it runs), not a shell around it that would die of SIGINT first.
	req.Command = "exec " + req.Command
	if tty {
		relay, err := a.relayTerminal()
		if err != nil {
			return nil, true, err
		}
		defer relay.stop()
		req.TTY = &relay.size
		in.Stdin, in.Resize = relay.stdin, relay.resize
	}
	var hintTo io.Writer
	if !tty {
		hintTo = a.stdio.Err
	}
	sigs, disarm := ir.arm(hintTo)
	defer disarm()
	in.Signal = sigs
	res, err = sess.BashInteractive(ctx, req, in, onOutput)
	return res, true, err
}
