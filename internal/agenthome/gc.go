package agenthome

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"vak/internal/errclass"
	"vak/internal/fsguard"
	"vak/internal/paths"
)

// Selection names the persistent homes GC removes: every one (All), or
// One, "workspace" (the home of Workspace, default the current directory)
// or "profile:NAME".
type Selection struct {
	All            bool
	One, Workspace string
	// DryRun lists the homes and removes nothing.
	DryRun bool
}

// Removed is one home GC removed (or, with DryRun, would remove): its
// size before, and Err when it could not be removed.
type Removed struct {
	Home     Home
	Usage    fsguard.Usage
	UsageErr error
	Err      error
}

// GC removes the selected persistent homes (each one is tried), never
// following a link planted in them. When none is selected, none says so
// and nothing is removed. A selection that names no home vak keeps is an
// error of class errclass.Invalid.
func GC(s Selection) (removed []Removed, none string, err error) {
	homes, err := List()
	if err != nil {
		return nil, "", err
	}
	if s.One != "" {
		if homes, none, err = selectOne(homes, s.One, s.Workspace); err != nil {
			return nil, "", errclass.Wrap(errclass.Invalid, err)
		}
		if len(homes) == 0 {
			return nil, none, nil
		}
	}
	if len(homes) == 0 {
		return nil, "no persistent homes", nil
	}
	for _, h := range homes {
		r := Removed{Home: h}
		r.Usage, r.UsageErr = h.Usage()
		if !s.DryRun {
			r.Err = h.Remove()
		}
		removed = append(removed, r)
	}
	return removed, "", nil
}

// selectOne keeps the home of choice one (and workspace ws) of homes; if
// there is none, none says so.
func selectOne(homes []Home, one, ws string) (sel []Home, none string, err error) {
	c, err := Parse(one)
	if err != nil {
		return nil, "", fmt.Errorf("--home: %w", err)
	}
	if c.Kind == Fresh {
		return nil, "", errors.New("--home fresh: a fresh home is never kept; nothing to remove")
	}
	if ws == "" {
		ws = "."
	}
	key := ""
	if c.Kind == Workspace {
		if key, err = paths.CanonicalWorkspace(ws); err != nil {
			// A workspace that is gone: its path is only a key.
			abs, aerr := filepath.Abs(ws)
			if _, serr := os.Lstat(abs); aerr != nil || !errors.Is(serr, os.ErrNotExist) {
				return nil, "", err
			}
			key = abs
		}
	}
	dir, err := Dir(c, key)
	if err != nil {
		return nil, "", err
	}
	for _, h := range homes {
		if h.Dir == dir {
			sel = append(sel, h)
		}
	}
	return sel, fmt.Sprintf("no %s home to remove (%s does not exist)", c, dir), nil
}

// WriteGC prints what GC removed (or, dryRun, would remove) to w, one
// home per line with its size; a home that could not be removed goes to
// warnf instead. It returns how many could not be removed.
func WriteGC(w io.Writer, warnf func(format string, args ...any), removed []Removed, dryRun bool) (failed int) {
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	for _, r := range removed {
		size := "size unknown"
		if r.UsageErr == nil {
			size = r.Usage.Human()
		}
		if r.Err != nil {
			warnf("%s: %v", r.Home.Label(), r.Err)
			failed++
			continue
		}
		fmt.Fprintf(w, "%s %s (%s, %s)\n", verb, r.Home.Label(), r.Home.Dir, size)
	}
	return failed
}
