package cli

import "vak/internal/interact"

// stdinFlags are -i and -t of vak run.
type stdinFlags = interact.Stdin

// hasTerminal reports whether vak's stdin and stdout are both terminals
// (then vak run gives the command one by default).
func (a *app) hasTerminal() bool {
	return interact.IsTerminal(a.stdio.In) && interact.IsTerminal(a.stdio.Out)
}
