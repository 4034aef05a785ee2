package agenthome

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/errclass"
)

// GC removes what the selection names and nothing else; a selection of no
// kept home is Invalid, one that matches nothing says so.
func TestGC(t *testing.T) {
	base := stateEnv(t)
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := GC(Selection{All: true}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Choice{{Kind: Workspace}, {Kind: Profile, Name: "a"}, {Kind: Profile, Name: "b"}} {
		d, err := Ensure(c, ws)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "f"), []byte("data"), 0o600)
	}
	tests := []struct {
		name      string
		sel       Selection
		removed   []string // labels, in order
		none, bad string
	}{
		{"fresh is never kept", Selection{One: "fresh"}, nil, "", "a fresh home is never kept"},
		{"not a home", Selection{One: "elsewhere"}, nil, "", "--home: "},
		{"an unknown profile", Selection{One: "profile:c"}, nil, "no profile:c home to remove", ""},
		{"dry run", Selection{One: "profile:a", DryRun: true}, []string{"profile:a"}, "", ""},
		{"one profile", Selection{One: "profile:a"}, []string{"profile:a"}, "", ""},
		{"it is gone", Selection{One: "profile:a"}, nil, "no profile:a home to remove", ""},
		{"the workspace's", Selection{One: "workspace", Workspace: ws}, []string{"workspace " + ws}, "", ""},
		{"every one left", Selection{All: true}, []string{"profile:b"}, "", ""},
		{"none left", Selection{All: true}, nil, "no persistent homes", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			removed, none, err := GC(tc.sel)
			if tc.bad != "" {
				if !errors.Is(err, errclass.Invalid) || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("err = %v, want class Invalid and %q", err, tc.bad)
				}
				return
			}
			if err != nil || !strings.HasPrefix(none, tc.none) || (tc.none == "") != (none == "") {
				t.Fatalf("GC = %v, %q, %v: want none %q", removed, none, err, tc.none)
			}
			var labels []string
			for _, r := range removed {
				if r.Err != nil || r.UsageErr != nil || r.Usage.Bytes == 0 {
					t.Errorf("%s: %+v", r.Home.Label(), r)
				}
				labels = append(labels, r.Home.Label())
				if _, err := os.Lstat(r.Home.Dir); (err == nil) != tc.sel.DryRun {
					t.Errorf("%s after GC (dry run %v): %v", r.Home.Dir, tc.sel.DryRun, err)
				}
			}
			if strings.Join(labels, ",") != strings.Join(tc.removed, ",") {
				t.Errorf("removed %q, want %q", labels, tc.removed)
			}
		})
	}
}
