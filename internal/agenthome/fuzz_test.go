package agenthome

import (
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/paths"
)

// FuzzParse: a project config (written by whoever controls the repository,
// the agent included) reaches sandbox.home, and so this parser. Whatever
// it accepts round-trips, and the directory it names is one entry directly
// below homes/profile or homes/workspace, never anywhere else.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"fresh", "workspace", "profile:work", "profile:../x", "profile:a/b", "profile:", "profile:a..b",
		"profile:.x", "profile:x\x00", "profile:" + strings.Repeat("a", 65), "profile:é", "Profile:x", " fresh"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		t.Setenv(paths.EnvStateHome, "/state")
		c, err := Parse(s)
		if err != nil {
			return
		}
		if c.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, c.String())
		}
		d, err := Dir(c, "/w")
		if err != nil {
			t.Fatalf("Dir(%+v): %v", c, err)
		}
		if c.Kind == Fresh {
			if d != "" {
				t.Fatalf("fresh has a directory %q", d)
			}
			return
		}
		parent := filepath.Join("/state/vak/homes", string(c.Kind))
		if filepath.Dir(d) != parent || filepath.Clean(d) != d || strings.ContainsAny(filepath.Base(d), "/\x00") || strings.HasPrefix(filepath.Base(d), ".") {
			t.Fatalf("Parse(%q) names %q, not one entry below %s", s, d, parent)
		}
	})
}
