package fsguard

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRelative(t *testing.T) {
	const ws = "/work/ws"
	tests := []struct {
		in, want string
		err      error
	}{
		{"a.txt", "a.txt", nil},
		{"./a//b/", "a/b", nil},
		{"a/../b", "b", nil},
		{".", ".", nil},
		{"/work/ws", ".", nil},
		{"/work/ws/", ".", nil},
		{"/work/ws/a/./b", "a/b", nil},
		{"/work/ws/a/../../ws/b", "b", nil},
		{"..", "", ErrOutside},
		{"../ws/a", "", ErrOutside},
		{"a/../../x", "", ErrOutside},
		{"/work/ws/../other", "", ErrOutside},
		{"/work/wsx/a", "", ErrOutside},
		{"/work", "", ErrOutside},
		{"/", "", ErrOutside},
		{"/proc/self/root/work/ws/a", "", ErrOutside},
		{"/proc/self/cwd/a", "", ErrOutside},
		{"/dev/fd/3", "", ErrOutside},
		{"", "", ErrInvalidPath},
		{"a\x00", "", ErrInvalidPath},
		{strings.Repeat("x", MaxPathBytes+1), "", ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := relative(ws, "read", tt.in)
			if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) || got != tt.want {
				t.Fatalf("relative(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestProtectedEntry(t *testing.T) {
	prot, err := normalizeProtected([]string{".git/hooks", ".git/config", ".vak", "./deploy/prod.sh/"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rel  string
		want bool
	}{
		{".git/hooks", true},
		{".git/hooks/pre-commit", true},
		{".git/hooks/a/b", true},
		{".git/config", true},
		{".git/config/x", true},
		{".vak", true},
		{".vak/config.toml", true},
		{".VAK/config.toml", true},
		{".Git/Hooks/x", true},
		{".g\u200cit/hooks/x", true},     // zero-width non-joiner, ignored by HFS+
		{".vak\ufeff/config.toml", true}, // BOM
		{".git/hoo\u212As/x", true},      // Kelvin sign folds to k
		{".git", true},                   // ancestor: a file here would shadow the git dir
		{"deploy", true},                 // ancestor
		{"deploy/prod.sh", true},
		{".git/description", false},
		{".git/hooksx", false},
		{".vakx", false},
		{"sub/.vak", false},
		{"sub/.git/hooks/pre-commit", true}, // a nested repository
		{"a/b/.GIT/config", true},
		{"sub/.git", true}, // a gitdir file would redirect the nested repository
		{"sub/.git/description", false},
		{"sub/.git/objects/ab/cd", false},
		{"sub/.gitx/hooks/x", false},
		{"deploy/other.sh", false},
		{"x", false},
	}
	for _, tt := range tests {
		if _, got := protectedEntry(prot, tt.rel); got != tt.want {
			t.Errorf("protectedEntry(%q) = %v, want %v", tt.rel, got, tt.want)
		}
	}
}

func TestExpandBraces(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  bool
	}{
		{"a", []string{"a"}, false},
		{"*.{go,md}", []string{"*.go", "*.md"}, false},
		{"{a,b}/{c,d}", []string{"a/c", "a/d", "b/c", "b/d"}, false},
		{"{a,{b,c}}x", []string{"ax", "bx", "cx"}, false},
		{"{,x}y", []string{"y", "xy"}, false},
		{`\{a,b\}`, []string{`\{a,b\}`}, false},
		{"{a", nil, true},
		{"a}", nil, true},
		{strings.Repeat("{a,b}", 9), nil, true}, // 512 > maxBraceExpansions
	}
	for _, tt := range tests {
		got, err := expandBraces(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("expandBraces(%q) = %q, %v", tt.in, got, err)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, path string
		match, enter  bool // enter: the directory path may hold matches
	}{
		{"*.go", "a.go", true, false},
		{"*.go", "d/a.go", false, false},
		{"**/*.go", "a.go", true, true},
		{"**/*.go", "d/e/a.go", true, true},
		{"d/**", "d/e/a", true, true},
		{"d/**", "d", true, true}, // ** matches zero segments (doublestar)
		{"d/**/x", "d/x", true, true},
		{"d/**/x", "d/a/b/x", true, true},
		{"d/**/x", "e/x", false, false},
		{"d/*/x", "d/a", false, true},
		{"d/*/x", "d/a/b", false, false},
		{"*", ".hidden", true, false},
		{"**/**/**/a", "a", true, true},
		{"[ab]?", "bz", true, false},
	}
	for _, tt := range tests {
		pats, err := compileGlob("/ws", "glob", tt.pattern)
		if err != nil {
			t.Fatal(err)
		}
		segs := strings.Split(tt.path, "/")
		if got := anyMatch(pats, segs); got != tt.match {
			t.Errorf("%q matches %q = %v", tt.pattern, tt.path, got)
		}
		if got := anyMayContain(pats, segs); got != tt.enter {
			t.Errorf("%q may be beneath %q = %v", tt.pattern, tt.path, got)
		}
	}
	// Many ** segments do not explode (the matcher is a DP, not backtracking).
	pats, err := compileGlob("/ws", "glob", strings.Repeat("**/a/", 200)+"b")
	if err != nil {
		t.Fatal(err)
	}
	if anyMatch(pats, strings.Split(strings.Repeat("a/", 500)+"c", "/")) {
		t.Fatal("unexpected match")
	}
}

// FuzzGlobPattern: compiling and matching any pattern never panics, never
// yields a ".." segment, and an accepted pattern never starts outside.
func FuzzGlobPattern(f *testing.F) {
	for _, s := range []string{"**/*.go", "{a,b}/{c,{d,e}}", "[", "\\", "a/../b", "/ws/x/*", "/etc/*", "{,}{,}{,}", "**/**"} {
		f.Add(s, "a/b/c.go")
	}
	f.Fuzz(func(t *testing.T, pattern, p string) {
		pats, err := compileGlob("/ws", "glob", pattern)
		if err != nil {
			return
		}
		if len(pats) > maxBraceExpansions {
			t.Fatalf("%d expansions", len(pats))
		}
		for _, pat := range pats {
			for _, s := range pat {
				if s == ".." || s == "" || s == "." {
					t.Fatalf("pattern %q compiled to segment %q", pattern, s)
				}
			}
		}
		segs := strings.Split(p, "/")
		anyMatch(pats, segs)
		anyMayContain(pats, segs)
		commonPrefix(pats)
	})
}

// FuzzIsGitName: the fast paths of IsGitName give the answer of the full
// comparison (ignorable code points stripped, case folded) for any name.
func FuzzIsGitName(f *testing.F) {
	for _, s := range []string{".git", ".GIT", ".Git", "git", ".gi", ".gitx", ".g\u00adit", ".git\ufe0f", "\u200b.git", ".g\u0130t", ".\u212agit", "a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		if got, want := IsGitName(seg), isGitNameSlow(seg); got != want {
			t.Fatalf("IsGitName(%q) = %v, the full comparison %v", seg, got, want)
		}
	})
}
