package paths

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCanonicalWorkspace(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	ws := filepath.Join(home, "src", "proj")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv(EnvConfigHome, "")
	t.Setenv(EnvStateHome, filepath.Join(base, "state"))
	link := filepath.Join(base, "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(ws, "f")
	os.WriteFile(file, nil, 0o644)

	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{ws, ws, true},
		{link, ws, true}, // symlinks resolved
		{filepath.Join(ws, "..", "proj"), ws, true}, // .. cleaned
		{home, "", false}, // contains home
		{filepath.Join(home, "src"), filepath.Join(home, "src"), true}, // below home is fine
		{base, "", false}, // contains home and state
		{"/", "", false},
		{file, "", false},
		{filepath.Join(base, "missing"), "", false},
	} {
		got, err := CanonicalWorkspace(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("CanonicalWorkspace(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadWorkspace) {
			t.Errorf("error %v does not wrap ErrBadWorkspace", err)
		}
	}
}

func TestWithin(t *testing.T) {
	for _, tc := range []struct {
		root, p string
		want    bool
	}{
		{"/a", "/a", true}, {"/a", "/a/b", true}, {"/a", "/ab", false}, {"/a/b", "/a", false}, {"/", "/x", true},
	} {
		if got := Within(tc.root, tc.p); got != tc.want {
			t.Errorf("Within(%q, %q) = %v", tc.root, tc.p, got)
		}
	}
}
