package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// tomlBlock finds fenced toml blocks in Markdown.
var tomlBlock = regexp.MustCompile("(?ms)^```toml\n(.*?)^```")

// TestDocsTOMLParses runs every toml block of README.md and docs/*.md
// through the real decoder and validation (Parse): an example a user copies
// must not make vak exit 78. A block that shows only some sections of a file
// gets the `version = 1` line every file starts with.
func TestDocsTOMLParses(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	blocks := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range tomlBlock.FindAllSubmatchIndex(data, -1) {
			blocks++
			line := 1 + strings.Count(string(data[:m[2]]), "\n")
			doc := string(data[m[2]:m[3]])
			if !strings.Contains(doc, "version =") {
				doc = "version = 1\n" + doc
			}
			if _, err := Parse(filepath.Base(f), []byte(doc)); err != nil {
				t.Errorf("%s: toml block %d (line %d) does not parse: %v", filepath.Base(f), i+1, line, err)
			}
		}
	}
	if blocks < 4 {
		t.Fatalf("found only %d toml blocks in README.md and docs/*.md", blocks)
	}
}
