package fsguard

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolvePath feeds arbitrary paths to every tool on a fresh workspace
// full of links that lead out, next to a planted secret. Invariants: no tool
// returns the secret, nothing outside the workspace is created or changed, no
// protected path is created or changed, and the links still refuse.
func FuzzResolvePath(f *testing.F) {
	seed := newFixture(f) // for the absolute seed paths
	for _, s := range []string{
		"hello.txt", "sub/inner.txt", "link-in", "link-in-dir/inner.txt",
		"link-out", "link-abs", "link-proc", "link-loop", "link-out-dir/secret.txt",
		"link-abs-dir/sub/x", "../outside/secret.txt", "sub/../../outside/secret.txt",
		seed.secretPath, seed.ws + "/../outside/secret.txt", seed.ws + "/link-out",
		"/proc/self/root" + seed.secretPath, "/proc/self/cwd/x", "/dev/fd/0", "/dev/stdin",
		".git/hooks/pre-commit", ".vak/config.toml", ".GIT/Hooks/x", ".git", "./.vak//",
		"a\x00b", "", ".", "..", "/", "//", "~/.ssh/id_rsa", "fifo", "\\..\\outside",
		"link-out-dir/../outside/secret.txt", "sub/./../link-out", "**/*", "{link-out,hello.txt}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		// Absolute seeds name the seed fixture; aim them at this one.
		fx := newFixture(t)
		p = strings.ReplaceAll(p, seed.base, fx.base)
		r := fx.open(t, true)
		if res, err := r.Read(p, 0, 0); err == nil && containsSecret(res.Content) {
			t.Fatalf("Read(%q) returned the secret", p)
		}
		_ = r.Write(p, []byte("fuzz"))
		_, _ = r.Edit(p, "u", "U", true)
		if res, err := r.Grep("TOP-SECRET", p, "", 0); err == nil {
			for _, m := range res.Matches {
				if strings.Contains(m.Text, secret) {
					t.Fatalf("Grep(%q) returned the secret", p)
				}
			}
		}
		if res, err := r.Glob(p, 0); err == nil {
			for _, q := range res.Paths {
				if strings.HasPrefix(q, "/") || strings.HasPrefix(q, "../") || q == ".." {
					t.Fatalf("Glob(%q) reported %q", p, q)
				}
			}
		}
		// Whatever the writes left behind, the name still never reads as
		// the secret.
		if res, err := r.Read(p, 0, 0); err == nil && containsSecret(res.Content) {
			t.Fatalf("Read(%q) after writes returned the secret", p)
		}
		fx.requireOutsideUnchanged(t)
		for _, prot := range []string{".git/hooks", ".vak", ".git/config"} {
			if prot == ".git/config" {
				res, err := r.Read(prot, 0, 0)
				if err != nil || string(res.Content) != "[core]\n\tbare = false\n" {
					t.Fatalf("protected .git/config changed after %q: %q %v", p, res.Content, err)
				}
				continue
			}
			if exists(filepath.Join(fx.ws, prot)) {
				t.Fatalf("protected %s created by %q", prot, p)
			}
		}
		for _, name := range []string{"link-out", "link-abs", "link-proc", "link-out-dir"} {
			if _, err := r.Read(name, 0, 0); err == nil || !(errors.Is(err, ErrOutside) || errors.Is(err, ErrIsDir)) {
				t.Fatalf("link %s no longer refused after %q: %v", name, p, err)
			}
		}
	})
}
