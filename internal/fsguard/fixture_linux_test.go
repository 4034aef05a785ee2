package fsguard

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"vak/internal/config"
)

// secret is the content of the planted file outside the workspace. No file
// tool may ever return it.
const secret = "TOP-SECRET-b7e1c0de"

// fixture is a workspace next to a planted secret:
//
//	base/outside/secret.txt          the secret
//	base/outside/sub/                an empty directory
//	base/ws/                         the workspace (canonical)
//	  hello.txt  sub/inner.txt  canary.txt  fifo  .git/config
//	  link-in -> hello.txt           link-in-dir -> sub
//	  link-out -> ../outside/secret.txt
//	  link-abs -> <base>/outside/secret.txt
//	  link-proc -> /proc/self/root<base>/outside/secret.txt
//	  link-out-dir -> ../outside     link-abs-dir -> <base>/outside
//	  link-loop -> link-loop
type fixture struct {
	base, ws, outside, secretPath string
	outsideState                  string // see snapshot
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{
		base:       base,
		ws:         filepath.Join(base, "ws"),
		outside:    filepath.Join(base, "outside"),
		secretPath: filepath.Join(base, "outside", "secret.txt"),
	}
	mkdir(t, f.outside, "sub")
	writeFile(t, f.secretPath, secret)
	mkdir(t, f.ws, "sub")
	mkdir(t, f.ws, ".git")
	writeFile(t, filepath.Join(f.ws, "hello.txt"), "hello\nworld\n")
	writeFile(t, filepath.Join(f.ws, "sub", "inner.txt"), "inner\n")
	writeFile(t, filepath.Join(f.ws, "canary.txt"), "CANARY inside\n")
	writeFile(t, filepath.Join(f.ws, ".git", "config"), "[core]\n\tbare = false\n")
	if err := syscall.Mkfifo(filepath.Join(f.ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"link-in":      "hello.txt",
		"link-in-dir":  "sub",
		"link-out":     "../outside/secret.txt",
		"link-abs":     f.secretPath,
		"link-proc":    "/proc/self/root" + f.secretPath,
		"link-out-dir": "../outside",
		"link-abs-dir": f.outside,
		"link-loop":    "link-loop",
	} {
		if err := os.Symlink(target, filepath.Join(f.ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	f.snapshot(t)
	return f
}

// open opens the fixture's workspace with the default protected list.
func (f *fixture) open(t testing.TB, writable bool) *Root {
	t.Helper()
	r, err := Open(f.ws, Options{Writable: writable, Protected: config.DefaultProtected})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// requireSecretIntact proves the planted secret is really there and readable
// directly (so a refusal was a refusal, not a missing file) and unchanged.
func (f *fixture) requireSecretIntact(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(f.secretPath)
	if err != nil || string(b) != secret {
		t.Fatalf("planted secret changed or unreadable: %q, %v", b, err)
	}
}

// snapshot records everything outside the workspace (names, types and
// contents under base, the workspace excluded). newFixture takes it; a test
// that plants more files outside takes it again.
func (f *fixture) snapshot(t testing.TB) {
	t.Helper()
	f.outsideState = f.outsideListing(t)
}

func (f *fixture) outsideListing(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(f.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == f.ws {
			return filepath.SkipDir
		}
		fmt.Fprintf(&b, "%s %v", p, d.Type())
		if d.Type().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// requireOutsideUnchanged asserts nothing outside the workspace was created,
// removed or changed, and that the secret is intact.
func (f *fixture) requireOutsideUnchanged(t testing.TB) {
	t.Helper()
	if got := f.outsideListing(t); got != f.outsideState {
		t.Fatalf("the file system outside the workspace changed:\n%s\nwas:\n%s", got, f.outsideState)
	}
	f.requireSecretIntact(t)
}

// requireNoTemp asserts no temporary file of Write is left anywhere in dir.
func requireNoTemp(t testing.TB, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tempPrefix) {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func mkdir(t testing.TB, parts ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(parts...), 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// wantErr asserts err wraps want (nil: no error).
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Fatalf("%s: unexpected error %v", what, err)
	case want != nil && !errors.Is(err, want):
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Fatalf("%s: error leaks the secret: %v", what, err)
	}
}

func containsSecret(b []byte) bool { return bytes.Contains(b, []byte(secret)) }
