package agenthome

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"vak/internal/paths"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Choice
	}{
		{"fresh", Choice{Kind: Fresh}},
		{"workspace", Choice{Kind: Workspace}},
		{"profile:work", Choice{Kind: Profile, Name: "work"}},
		{"profile:a.b_c-9", Choice{Kind: Profile, Name: "a.b_c-9"}},
		{"profile:" + strings.Repeat("x", MaxNameLen), Choice{Kind: Profile, Name: strings.Repeat("x", MaxNameLen)}},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("Parse(%q).String() = %q", tc.in, got.String())
		}
	}
}

// Every name that could reach outside homes/profile, or is not a plain
// name, is refused, and the error names the value.
func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		"", "Fresh", "home", "workspace:x", "profile", "profile:", "profile:..", "profile:.", "profile:a/b",
		"profile:/etc", "profile:../x", "profile:a..b", "profile:.hidden", "profile:-x", "profile:a\nb",
		"profile:a\x00b", "profile:a\x1bb", "profile:a b", "profile:é", "profile:a\\b",
		"profile:" + strings.Repeat("x", MaxNameLen+1),
	} {
		c, err := Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", in, c)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): %v does not wrap ErrInvalid", in, err)
		}
		name := strings.TrimPrefix(in, "profile:")
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("Parse(%q): error %q does not name the value", in, err)
		}
	}
}

func stateEnv(t *testing.T) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(paths.EnvStateHome, filepath.Join(base, "state"))
	return base
}

// A workspace home is one per canonical workspace, in the state dir,
// 0700; a profile home is shared; fresh has none.
func TestEnsure(t *testing.T) {
	base := stateEnv(t)
	wsA, wsB := filepath.Join(base, "a"), filepath.Join(base, "b")
	a1, err := Ensure(Choice{Kind: Workspace}, wsA)
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := Ensure(Choice{Kind: Workspace}, wsA)
	b, _ := Ensure(Choice{Kind: Workspace}, wsB)
	if a1 != a2 || a1 == b {
		t.Errorf("workspace homes: a=%s a again=%s b=%s", a1, a2, b)
	}
	state, _ := paths.StateDir()
	for _, d := range []string{a1, b} {
		if !paths.Within(state, d) {
			t.Errorf("%s is not in the state dir %s", d, state)
		}
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want a 0700 directory", d, fi.Mode(), err)
		}
	}
	pa, _ := Ensure(Choice{Kind: Profile, Name: "p"}, wsA)
	pb, _ := Ensure(Choice{Kind: Profile, Name: "p"}, wsB)
	if pa != pb || pa == a1 {
		t.Errorf("profile homes: %s %s", pa, pb)
	}
	if d, err := Ensure(Choice{Kind: Fresh}, wsA); d != "" || err != nil {
		t.Errorf("fresh: %q %v", d, err)
	}
	hs, err := List()
	if err != nil || len(hs) != 3 {
		t.Fatalf("List = %+v, %v", hs, err)
	}
	labels := []string{hs[0].Label(), hs[1].Label(), hs[2].Label()}
	want := []string{"workspace " + wsA, "workspace " + wsB, "profile:p"}
	if a1 > b {
		want[0], want[1] = want[1], want[0]
	}
	if strings.Join(labels, "|") != strings.Join(want, "|") {
		t.Errorf("labels %q, want %q", labels, want)
	}
}

// A link put where a home belongs is never used as a home.
func TestEnsureRefusesLink(t *testing.T) {
	base := stateEnv(t)
	target := filepath.Join(base, "elsewhere")
	os.Mkdir(target, 0o755)
	d, err := Dir(Choice{Kind: Profile, Name: "x"}, "/w")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(d), 0o700)
	if err := os.Symlink(target, d); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(Choice{Kind: Profile, Name: "x"}, "/w"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Ensure over a link: %v, want ErrInvalid", err)
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o755 {
		t.Errorf("the link's target changed mode: %v", fi.Mode())
	}
}

// Removing a home whose agent planted links to host files (and to the
// host's home) removes the links and leaves their targets alone; the size
// does not count them. Positive control: the home's own files are gone.
func TestRemoveDoesNotFollowLinks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("host-side removal needs openat2")
	}
	base := stateEnv(t)
	canary := filepath.Join(base, "real-home", ".ssh", "id_ed25519")
	os.MkdirAll(filepath.Dir(canary), 0o700)
	if err := os.WriteFile(canary, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Ensure(Choice{Kind: Workspace}, filepath.Join(base, "ws"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(d, ".claude", "projects"), 0o755)
	os.WriteFile(filepath.Join(d, ".claude", "settings.json"), []byte("{}"), 0o600)
	os.Symlink(canary, filepath.Join(d, ".claude", "key"))
	os.Symlink(filepath.Dir(canary), filepath.Join(d, ".ssh"))
	os.Symlink(filepath.Join(base, "real-home"), filepath.Join(d, ".claude", "projects", "home"))
	hs, err := List()
	if err != nil || len(hs) != 1 {
		t.Fatalf("List = %+v, %v", hs, err)
	}
	u, err := hs[0].Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Bytes >= 1<<20 || u.Entries != 6 {
		t.Errorf("usage %+v: want 6 entries and the linked 1 MiB file not counted", u)
	}
	if err := hs[0].Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(d); !os.IsNotExist(err) {
		t.Errorf("home survived: %v", err)
	}
	if _, err := os.Lstat(d + pathSuffix); !os.IsNotExist(err) {
		t.Errorf("record survived: %v", err)
	}
	if fi, err := os.Stat(canary); err != nil || fi.Size() != 1<<20 {
		t.Errorf("the host file behind the link: %v %v", fi, err)
	}
	if hs, _ := List(); len(hs) != 0 {
		t.Errorf("List after Remove = %+v", hs)
	}
}
