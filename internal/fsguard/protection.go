package fsguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"vak/internal/sandbox"
)

// PlanProtection walks workspace (canonical) without following links and
// makes its sandbox.Protection for configured (workspace-relative) paths. Without
// beneath-resolution (ErrUnsupported: not Linux) it falls back to
// the configured paths that exist, by name, skipping any reached through a
// link; there is nothing to pin then.
func PlanProtection(workspace string, configured []string) (sandbox.Protection, error) {
	p := sandbox.Protection{Configured: configured}
	plan, err := PlanWorkspace(workspace, configured)
	if errors.Is(err, ErrUnsupported) {
		for _, rel := range configured {
			full := filepath.Join(workspace, rel)
			fi, err := os.Lstat(full)
			if err != nil || fi.Mode()&os.ModeSymlink != 0 || !(fi.IsDir() || fi.Mode().IsRegular()) {
				continue
			}
			if real, err := filepath.EvalSymlinks(full); err == nil && real == full {
				p.ReadOnly = append(p.ReadOnly, full)
			}
		}
		return p, nil
	}
	if err != nil {
		return sandbox.Protection{}, fmt.Errorf("protected paths of %s: %w", workspace, err)
	}
	p.ReadOnly = Abs(workspace, plan.ReadOnly)
	p.Pin = Abs(workspace, plan.Pin)
	return p, nil
}
