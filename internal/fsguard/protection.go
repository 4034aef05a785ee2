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

// ProtectionOf is the protected-path plan PlanProtection would make of
// workspace (canonical) from what a walk of it found: git, its .git
// entries (Scan.Git), and prot, the configured paths expanded to every
// repository (ExpandProtected) with what each is (Tree.Stat). One walk
// then serves both the plan and the tripwire's record of the same moment
// (worker.TripwireState.Protection).
func ProtectionOf(workspace string, configured []string, git, prot map[string]Entry) sandbox.Protection {
	pin, ro := planOf(git, prot)
	return sandbox.Protection{Configured: configured, ReadOnly: Abs(workspace, ro), Pin: Abs(workspace, pin)}
}
