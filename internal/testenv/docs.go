package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Doc is a Markdown document of the repository that users read: README.md
// or a page of docs/.
type Doc struct {
	Name string // relative to the repository: README.md, docs/usage.md
	Path string // absolute
	Text string
}

// RepoRoot returns the repository's root: the nearest directory above the
// working directory (a package's, in `go test`) that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Docs returns README.md and docs/*.md, README first. The doc tests run
// what these documents show: their TOML blocks (config), their vak command
// lines (cli), their links and length (archtest).
func Docs(t testing.TB) []Doc {
	t.Helper()
	root := RepoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var docs []Doc
	for _, p := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, p)
		docs = append(docs, Doc{Name: filepath.ToSlash(name), Path: p, Text: string(data)})
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d documents in %s (README.md, docs/*.md)", len(docs), root)
	}
	return docs
}
