package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"vak/internal/agenthome"
	"vak/internal/paths"
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
// homes, printing each with its size. A home that cannot be removed is
// reported and the others are still removed; the exit status is then 1.
func (a *app) gcHomes(f gcHomeFlags) error {
	switch {
	case f.all && f.one != "":
		return exit(ExitUsage, errors.New("--homes and --home: give one of them"))
	case !f.all && f.one == "":
		return exit(ExitUsage, errors.New("--dry-run needs --homes, --home or --images"))
	case f.workspace != "" && f.one != string(agenthome.Workspace):
		return exit(ExitUsage, errors.New("--workspace goes with --home workspace"))
	}
	homes, err := agenthome.List()
	if err != nil {
		return exit(ExitInternal, err)
	}
	if f.one != "" {
		c, err := agenthome.Parse(f.one)
		if err != nil {
			return exit(ExitUsage, fmt.Errorf("--home: %w", err))
		}
		if c.Kind == agenthome.Fresh {
			return exit(ExitUsage, errors.New("--home fresh: a fresh home is never kept; nothing to remove"))
		}
		ws := ""
		if c.Kind == agenthome.Workspace {
			if ws, err = paths.CanonicalWorkspace(orDot(f.workspace)); err != nil {
				// A workspace that is gone: its path is only a key.
				abs, aerr := filepath.Abs(orDot(f.workspace))
				if _, serr := os.Lstat(abs); aerr != nil || !errors.Is(serr, os.ErrNotExist) {
					return exit(ExitUsage, err)
				}
				ws = abs
			}
		}
		dir, err := agenthome.Dir(c, ws)
		if err != nil {
			return exit(ExitUsage, err)
		}
		var sel []agenthome.Home
		for _, h := range homes {
			if h.Dir == dir {
				sel = append(sel, h)
			}
		}
		homes = sel
		if len(homes) == 0 {
			fmt.Fprintf(a.stdio.Out, "no %s home to remove (%s does not exist)\n", c, dir)
			return nil
		}
	}
	if len(homes) == 0 {
		fmt.Fprintln(a.stdio.Out, "no persistent homes")
		return nil
	}
	verb := "removed"
	if f.dryRun {
		verb = "would remove"
	}
	failed := 0
	for _, h := range homes {
		size := "size unknown"
		if u, err := h.Usage(); err == nil {
			size = humanSize(u)
		}
		if !f.dryRun {
			if err := h.Remove(); err != nil {
				a.warnf("%s: %v", h.Label(), err)
				failed++
				continue
			}
		}
		fmt.Fprintf(a.stdio.Out, "%s %s (%s, %s)\n", verb, h.Label(), h.Dir, size)
	}
	if failed > 0 {
		return exit(1, fmt.Errorf("%d home(s) could not be removed", failed))
	}
	return nil
}
