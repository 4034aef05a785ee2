package fsguard

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// PlanProtection is the one protected-path plan every backend takes as
// data: the configured names as given, the mounts as absolute paths in the
// workspace, nested repositories included, and nothing reached through a
// link (a planted .vscode -> ~/.kube is neither mounted nor pinned).
func TestPlanProtection(t *testing.T) {
	w := newHostWorld(t)
	for _, d := range []string{".git/hooks", "sub/.git/hooks"} {
		os.MkdirAll(filepath.Join(w.ws, d), 0o755)
	}
	writeFile(t, filepath.Join(w.ws, ".git", "config"), "[core]\n")
	os.Symlink(filepath.Join(w.home, ".kube"), filepath.Join(w.ws, ".vscode"))
	configured := []string{".git/hooks", ".git/config", ".vscode", ".envrc"}
	p, err := PlanProtection(w.ws, configured)
	if err != nil {
		t.Fatal(err)
	}
	abs := func(rels ...string) []string { return Abs(w.ws, rels) }
	for _, tc := range []struct {
		name      string
		got, want []string
	}{
		{"Configured", p.Configured, configured},
		{"Pin", p.Pin, abs(".git", "sub", "sub/.git")},
		{"ReadOnly", p.ReadOnly, abs(".git/config", ".git/hooks", "sub/.git/hooks")},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	for _, path := range append(slices.Clone(p.Pin), p.ReadOnly...) {
		if !filepath.IsAbs(path) || strings.HasPrefix(path, filepath.Join(w.ws, ".vscode")) {
			t.Errorf("plan mounts %s: not absolute, or reached through a link", path)
		}
	}
	// A workspace that cannot be opened is an error naming it.
	if _, err := PlanProtection(filepath.Join(w.ws, "missing"), configured); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing workspace: %v", err)
	}
}
