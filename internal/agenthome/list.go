package agenthome

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"vak/internal/fsguard"
)

// Home is one persistent home found in the state directory.
type Home struct {
	Choice Choice
	// Dir is the home's host directory.
	Dir string
	// Workspace is the canonical workspace a workspace home belongs to (from
	// its record; empty when the record is missing).
	Workspace string
}

// List returns the persistent homes in the state directory, workspace
// homes first, each kind sorted by directory name. Entries that are not
// directories vak made (links, files) are skipped: vak never made them.
func List() ([]Home, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	var out []Home
	for _, k := range []Kind{Workspace, Profile} {
		dir := filepath.Join(root, string(k))
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("agenthome: %w", err)
		}
		names := make([]string, 0, len(ents))
		for _, e := range ents {
			if e.Type().IsDir() {
				names = append(names, e.Name())
			}
		}
		slices.Sort(names)
		for _, n := range names {
			h := Home{Choice: Choice{Kind: k}, Dir: filepath.Join(dir, n)}
			if k == Profile {
				if ValidateName(n) != nil {
					continue
				}
				h.Choice.Name = n
			} else if b, err := os.ReadFile(h.Dir + pathSuffix); err == nil {
				h.Workspace = strings.TrimSuffix(string(b), "\n")
			}
			out = append(out, h)
		}
	}
	return out, nil
}

// Usage is what h holds, counted without following any link in it.
func (h Home) Usage() (fsguard.Usage, error) {
	t, err := fsguard.OpenTree(h.Dir)
	if err != nil {
		return fsguard.Usage{}, err
	}
	defer t.Close()
	return t.Usage()
}

// Remove deletes h with everything in it, without following any link in
// it (a link planted in the home is removed as a link; its target stays),
// and the record of a workspace home.
func (h Home) Remove() error {
	parent, base := filepath.Dir(h.Dir), filepath.Base(h.Dir)
	t, err := fsguard.OpenTree(parent)
	if err != nil {
		return fmt.Errorf("agenthome: remove %s: %w", h.Dir, err)
	}
	defer t.Close()
	if err := t.Remove(base); err != nil {
		return fmt.Errorf("agenthome: remove %s: %w", h.Dir, err)
	}
	if h.Choice.Kind == Workspace {
		if err := t.Remove(base + pathSuffix); err != nil {
			return fmt.Errorf("agenthome: remove %s: %w", h.Dir+pathSuffix, err)
		}
	}
	return nil
}

// Label names h for listings: "workspace /path/to/ws" or "profile:NAME".
func (h Home) Label() string {
	if h.Choice.Kind == Workspace {
		ws := h.Workspace
		if ws == "" {
			ws = "(unknown workspace)"
		}
		return "workspace " + ws
	}
	return h.Choice.String()
}
