package cli

import (
	"errors"
	"fmt"

	"vak/internal/agenthome"
	"vak/internal/errclass"
)

// gcHomeFlags select the persistent homes vak gc removes.
type gcHomeFlags struct {
	all       bool
	one       string
	workspace string
	dryRun    bool
	images    bool
}

// gcHomes removes (or, with --dry-run, lists) the selected persistent
// homes (agenthome.GC), printing each with its size. A home that cannot be
// removed is reported and the others are still removed; the exit status
// is then 1.
func (a *app) gcHomes(f gcHomeFlags) error {
	switch {
	case f.all && f.one != "":
		return exit(ExitUsage, errors.New("--homes and --home: give one of them"))
	case !f.all && f.one == "":
		return exit(ExitUsage, errors.New("--dry-run needs --homes, --home or --images"))
	case f.workspace != "" && f.one != string(agenthome.Workspace):
		return exit(ExitUsage, errors.New("--workspace goes with --home workspace"))
	}
	removed, none, err := agenthome.GC(agenthome.Selection{All: f.all, One: f.one, Workspace: f.workspace, DryRun: f.dryRun})
	switch {
	case errors.Is(err, errclass.Invalid):
		return exit(ExitUsage, err)
	case err != nil:
		return exit(ExitInternal, err)
	case none != "":
		fmt.Fprintln(a.stdio.Out, none)
		return nil
	}
	failed := agenthome.WriteGC(a.stdio.Out, a.warnf, removed, f.dryRun)
	if failed > 0 {
		return exit(1, fmt.Errorf("%d home(s) could not be removed", failed))
	}
	return nil
}
