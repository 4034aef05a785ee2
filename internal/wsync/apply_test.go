package wsync

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"vak/internal/fsguard"
)

// TestApplyRefusesProtected: a session's changes come back except what
// the tripwire protects, in every spelling, links out of the workspace or
// onto a protected path, and writes through a link the workspace has. The
// benign entries in the same stream are applied (the control).
func TestApplyRefusesProtected(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "same.txt"), []byte("same"), 0o644)
	os.MkdirAll(filepath.Join(ws, "real"), 0o755)
	os.Symlink(".git", filepath.Join(ws, "docs")) // a link the host workspace already has
	match, err := fsguard.ProtectedMatcher([]string{".git", ".vscode", ".envrc"})
	if err != nil {
		t.Fatal(err)
	}
	s := stream(t,
		entry{name: "src/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "src/main.go", body: "package main", typ: tar.TypeReg},
		entry{name: "same.txt", body: "same", typ: tar.TypeReg},
		entry{name: ".git/", typ: tar.TypeDir, mode: 0o755},
		entry{name: ".git/hooks/", typ: tar.TypeDir, mode: 0o755},
		entry{name: ".git/hooks/pre-commit", body: "#!/bin/sh\ncurl evil", typ: tar.TypeReg, mode: 0o755},
		entry{name: ".GIT/", typ: tar.TypeDir, mode: 0o755},
		entry{name: ".GIT/config", body: "[core]\nhooksPath=/tmp", typ: tar.TypeReg},
		entry{name: "sub/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "sub/.git", body: "gitdir: /tmp/evil", typ: tar.TypeReg},
		entry{name: ".envrc", body: "curl evil", typ: tar.TypeReg},
		entry{name: ".g\u200bit", body: "zero width", typ: tar.TypeReg},
		entry{name: "abs", link: "/etc/passwd", typ: tar.TypeSymlink, mode: 0o777},
		entry{name: "up", link: "../../x", typ: tar.TypeSymlink, mode: 0o777},
		entry{name: "togit", link: "src/../.git/config", typ: tar.TypeSymlink, mode: 0o777},
		entry{name: "ok-link", link: "src/main.go", typ: tar.TypeSymlink, mode: 0o777},
		entry{name: "docs/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "docs/hooks/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "docs/hooks/post-checkout", body: "curl evil", typ: tar.TypeReg, mode: 0o755},
		entry{name: "real", body: "file over a dir", typ: tar.TypeReg},
	)
	rep, err := Apply(bytes.NewReader(s), ws, ApplyOptions{Protected: match})
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, r := range rep.Refused {
		refused = append(refused, r.Path)
	}
	for _, want := range []string{".git", ".GIT", "sub/.git", ".envrc", ".g\u200bit", "abs", "up", "togit", "real"} {
		if !slices.Contains(refused, want) {
			t.Errorf("%q was not refused (refused: %v)", want, rep.Refused)
		}
	}
	// docs: the session has a directory where the host has a link into
	// .git: the link is replaced, never written through.
	if !slices.Equal(rep.Written, []string{"docs", "docs/hooks", "docs/hooks/post-checkout", "ok-link", "src", "src/main.go", "sub"}) || rep.Unchanged != 1 {
		t.Errorf("written %v, unchanged %d", rep.Written, rep.Unchanged)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "src", "main.go")); string(data) != "package main" {
		t.Errorf("the benign file was not applied: %q", data)
	}
	for _, p := range []string{".git/hooks/pre-commit", ".git/hooks/post-checkout", "sub/.git", ".envrc"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(data) != "[core]\n" {
		t.Errorf(".git/config changed: %q", data)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "real")); err != nil || !fi.IsDir() {
		t.Errorf("the directory real was replaced")
	}
	if fi, err := os.Lstat(filepath.Join(ws, "docs")); err != nil || !fi.IsDir() {
		t.Errorf("docs is not the session's directory: %v", err)
	}
}

// TestApplyMalformedChangesNothing: a stream that fails to unpack (a
// refused entry late in it) leaves the workspace as it was.
func TestApplyMalformedChangesNothing(t *testing.T) {
	ws := t.TempDir()
	s := stream(t,
		entry{name: "a.txt", body: "a", typ: tar.TypeReg},
		entry{name: "../escape", body: "x", typ: tar.TypeReg},
	)
	_, err := Apply(bytes.NewReader(s), ws, ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "nothing was applied") {
		t.Fatalf("Apply: %v", err)
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Errorf("the workspace changed: %v", ents)
	}
	// Control: the same stream without the bad entry applies.
	if _, err := Apply(bytes.NewReader(stream(t, entry{name: "a.txt", body: "a", typ: tar.TypeReg})), ws, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(data) != "a" {
		t.Errorf("control: %q", data)
	}
}
