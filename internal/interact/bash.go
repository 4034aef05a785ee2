package interact

import (
	"context"
	"io"

	"vak/internal/broker"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// Stdin is what -i and -t asked for.
type Stdin struct {
	Interactive bool // -i: forward stdin
	TTY         bool // -t's value
	TTYSet      bool // -t was given (true or false); otherwise automatic
}

// Mode says whether a command runs interactively and on a terminal: -t
// by default when in and out are both terminals and backend b runs
// interactive commands (like docker run -it), -t's value when given.
func Mode(b sandbox.Backend, f Stdin, in, out any) (tty, interactive bool) {
	tty = IsTerminal(in) && IsTerminal(out) && sandbox.CheckInteractive(b) == nil
	if f.TTYSet {
		tty = f.TTY
	}
	return tty, tty || f.Interactive
}

// IO is vak's own standard streams.
type IO struct {
	In       io.Reader
	Out, Err io.Writer
}

// Bash runs req in sess as an interactive command when f asks for it
// (Mode): stdin is forwarded, and on a terminal the user's terminal is put
// in raw mode (every key, Ctrl-C included, goes to the command's own
// terminal inside the sandbox), its size follows the user's, and its mode
// is restored when the command ends, whichever way. ok is false when
// neither applies; the caller then runs req as a plain command.
//
// The first SIGINT vak receives while the command runs is forwarded to it
// (ir.Arm); a second one, or SIGTERM or SIGHUP, tears the run down. With a
// terminal Ctrl-C is a byte typed into the command's terminal, which sends
// its foreground process group SIGINT there: vak gets no signal at all.
func Bash(ctx context.Context, sess *broker.Session, b sandbox.Backend, req wire.BashArgs, f Stdin, std IO, ir *Interrupts, onOutput func(string, []byte)) (res *wire.BashResult, ok bool, err error) {
	tty, interactive := Mode(b, f, std.In, std.Out)
	if !interactive {
		return nil, false, nil
	}
	in := broker.Interaction{Stdin: std.In}
	req.Interactive = true
	// The command replaces the worker's sh -c, so that it alone is in the
	// terminal's foreground process group: Ctrl-C interrupts it (and what
	// it runs), not a shell around it that would die of SIGINT first.
	req.Command = "exec " + req.Command
	if tty {
		relay, err := StartRelay(std.In, std.Out)
		if err != nil {
			return nil, true, err
		}
		defer relay.Stop()
		req.TTY = &relay.Size
		in.Stdin, in.Resize = relay.Stdin, relay.Resize
	}
	var hintTo io.Writer
	if !tty {
		hintTo = std.Err
	}
	sigs, disarm := ir.Arm(hintTo)
	defer disarm()
	in.Signal = sigs
	res, err = sess.BashInteractive(ctx, req, in, onOutput)
	return res, true, err
}
