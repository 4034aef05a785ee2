package taskenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"vak/internal/fsguard"
)

// protectionPlan walks the workspace without following links for what a
// container mounts to protect it (fsguard.Plan). Without beneath-resolution
// (not Linux) it falls back to the protected paths that exist, by name,
// skipping any reached through a link.
func protectionPlan(ws string, protected []string) (fsguard.Plan, error) {
	pl, err := fsguard.PlanWorkspace(ws, protected)
	if errors.Is(err, fsguard.ErrUnsupported) {
		for _, rel := range protected {
			full := filepath.Join(ws, rel)
			fi, err := os.Lstat(full)
			if err != nil || fi.Mode()&os.ModeSymlink != 0 || !(fi.IsDir() || fi.Mode().IsRegular()) {
				continue
			}
			if real, err := filepath.EvalSymlinks(full); err == nil && real == full {
				pl.ReadOnly = append(pl.ReadOnly, rel)
			}
		}
		return pl, nil
	}
	if err != nil {
		return fsguard.Plan{}, fmt.Errorf("%w: protected paths: %v", ErrInvalidSpec, err)
	}
	return pl, nil
}
