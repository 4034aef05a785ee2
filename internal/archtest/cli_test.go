package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cliMaxLines bounds internal/cli's code (test files aside; lines that
// are blank or only a comment do not count, help texts do): the command
// line parses flags, calls one package function per command, prints and
// maps errors to exit codes; logic grows in the package that owns it.
const cliMaxLines = 2400

// TestCLIThin keeps internal/cli flag parsing and printing.
func TestCLIThin(t *testing.T) {
	files, err := filepath.Glob("../cli/*.go")
	if err != nil {
		t.Fatal(err)
	}
	n, counted := 0, 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
				n++
			}
		}
		counted++
	}
	if counted < 10 {
		t.Fatalf("found %d files in internal/cli: the glob is wrong", counted)
	}
	if n >= cliMaxLines {
		t.Errorf("internal/cli has %d lines of code, want under %d: move logic into the package that owns it (see docs/ARCHITECTURE.md)", n, cliMaxLines)
	}
}
