package config

import (
	"regexp"
	"strings"
	"testing"

	"vak/internal/testenv"
)

// tomlBlock finds fenced toml blocks in Markdown.
var tomlBlock = regexp.MustCompile("(?ms)^```toml\n(.*?)^```")

// TestDocsTOMLParses runs every toml block of README.md and docs/*.md
// through the real decoder and validation (Parse): an example a user copies
// must not make vak exit 78. A block that shows only some sections of a file
// gets the `version = 1` line every file starts with.
func TestDocsTOMLParses(t *testing.T) {
	blocks := 0
	for _, d := range testenv.Docs(t) {
		for i, m := range tomlBlock.FindAllStringSubmatchIndex(d.Text, -1) {
			blocks++
			line := 1 + strings.Count(d.Text[:m[2]], "\n")
			doc := d.Text[m[2]:m[3]]
			if !strings.Contains(doc, "version =") {
				doc = "version = 1\n" + doc
			}
			if _, err := Parse(d.Name, []byte(doc)); err != nil {
				t.Errorf("%s: toml block %d (line %d) does not parse: %v", d.Name, i+1, line, err)
			}
		}
	}
	if blocks < 4 {
		t.Fatalf("found only %d toml blocks in README.md and docs/*.md", blocks)
	}
}
