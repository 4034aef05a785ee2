package archtest

import (
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"vak/internal/testenv"
)

// outsideRef matches a citation of a document that is not in the
// repository: a path into the directory of notes beside the checkout, the
// numbered design notes vak was first written from (by number, by their
// test numbers, or as "the" notes), and the notes of the experiments that
// came before the code (the cases of TestOutsideRefsMatcher spell each
// form). The repository explains itself: a doc or comment says what it
// means in its own words or links a file of the tree. Fuzz seeds and
// "seeds the gateway" are ordinary words and do not match.
var outsideRef = regexp.MustCompile(`(^|[^\w/.])(\.\./)*shared/|(?i)\bseeds?[\s/_-]+(\d{3}|tests?\b|docs?\b)|\bthe\s+seed's|\bseed\s+documents?\b|\bthe\s+spike\b|\bspike\s+notes\b`)

// TestOutsideRefsMatcher pins what outsideRef finds, so that the tree
// walk below cannot pass by matching nothing.
func TestOutsideRefsMatcher(t *testing.T) {
	for _, tc := range []struct {
		text string
		hit  bool
	}{
		{"the two design documents are in `../shared/seeds/` (read both)", true},
		{"see shared/notes.md", true},
		{"Package taskenv is vak's task environments (seed 000, \"Task environments\")", true},
		{"# Nested Docker (seed 002, issue 14)", true},
		{"brokered workspace network (seed\n002, \"Agent network\")", true},
		{"// Seed test 2: live exec, marker output", true},
		{"Defaults for Limits, the seed's hard caps.", true},
		{"the measured recipe is in the nested-Docker spike notes", true},
		{"the capabilities the Spike measured", true},
		{"at a load spike (warm round trips of 20 ms)", false},
		{"as the seed document says", true},
		{"f.Add(seed) // fuzz seeds for the parser", false},
		{"prepare seeds the gateway with the placeholders", false},
		{"Absolute seeds name the seed fixture", false},
		{"for seed := range uint64(12)", false},
		{"allow(rd(\"/Users/Shared/notes.txt\"))", false},
		{"/Volumes/scratch/shared/x", false},
		{"docs/worker-protocol.md describes the protocol", false},
	} {
		if got := outsideRef.MatchString(tc.text); got != tc.hit {
			t.Errorf("outsideRef.MatchString(%q) = %v, want %v", tc.text, got, tc.hit)
		}
	}
}

// TestNoOutsideRefs: no Markdown file, script or Go comment of the
// repository (third_party/ and testdata/ aside: code of others and fuzz
// corpora) cites a document outside the tree (outsideRef).
func TestNoOutsideRefs(t *testing.T) {
	root := testenv.RepoRoot(t)
	var scanned []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "third_party", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // never follow a link
		}
		texts, ok, err := citingTexts(path, rel)
		if err != nil || !ok {
			return err
		}
		scanned = append(scanned, rel)
		for _, tx := range texts {
			for _, m := range outsideRef.FindAllStringIndex(tx.text, -1) {
				line := tx.line + strings.Count(tx.text[:m[0]], "\n")
				t.Errorf("%s:%d cites a document outside the repository: %q", rel, line, strings.TrimSpace(tx.text[m[0]:m[1]]))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Control: the walk reached the documents and the code it guards.
	for _, want := range []string{"README.md", "docs/ARCHITECTURE.md", "internal/taskenv/doc.go", "scripts/test", ".ci/run"} {
		found := false
		for _, s := range scanned {
			found = found || s == filepath.FromSlash(want)
		}
		if !found {
			t.Errorf("control: %s was not scanned", want)
		}
	}
	if len(scanned) < 200 {
		t.Errorf("control: only %d files scanned", len(scanned))
	}
}

// citedText is text of a file that may cite documents, with its first
// line number.
type citedText struct {
	text string
	line int
}

// citingTexts returns the text of path that is prose: a Markdown file or a
// script whole, a Go file's comments. ok is false for other files.
func citingTexts(path, rel string) (texts []citedText, ok bool, err error) {
	slashed := filepath.ToSlash(rel)
	switch {
	case strings.HasSuffix(path, ".go"):
		texts, err := goComments(path)
		return texts, err == nil, err
	case strings.HasSuffix(path, ".md"), strings.HasSuffix(path, ".sh"),
		strings.HasPrefix(slashed, "scripts/"), strings.HasPrefix(slashed, ".ci/"):
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, false, err
		}
		return []citedText{{string(data), 1}}, true, nil
	}
	return nil, false, nil
}

// goComments returns the comments of a Go file, a run of line comments on
// consecutive lines as one text (a citation may be wrapped).
func goComments(path string) ([]citedText, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	file := fset.AddFile(path, -1, len(src))
	var sc scanner.Scanner
	var scanErr error
	sc.Init(file, src, func(pos token.Position, msg string) { scanErr = fmt.Errorf("%s: %s", pos, msg) }, scanner.ScanComments)
	var texts []citedText
	lastLine := -1
	for {
		pos, tok, lit := sc.Scan()
		if tok == token.EOF {
			break
		}
		if tok != token.COMMENT {
			lastLine = -1
			continue
		}
		line := fset.Position(pos).Line
		text := strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(lit, "/*"), "*/"), "//")
		if n := len(texts); n > 0 && lastLine == line-1 && strings.HasPrefix(lit, "//") {
			texts[n-1].text += "\n" + text
		} else {
			texts = append(texts, citedText{text, line})
		}
		lastLine = line + strings.Count(lit, "\n")
	}
	return texts, scanErr
}

// readmeMaxLines is how long README.md may grow: what vak is, the two
// commands, install, a usage summary and links; the rest is in docs/.
const readmeMaxLines = 150

// TestREADMEShort keeps README.md a page a newcomer reads in five minutes.
func TestREADMEShort(t *testing.T) {
	readme := testenv.Docs(t)[0]
	if n := strings.Count(readme.Text, "\n"); n > readmeMaxLines || n < 20 {
		t.Errorf("%s has %d lines, want 20 to %d: move details into docs/", readme.Name, n, readmeMaxLines)
	}
}

// mdLink finds the targets of Markdown links.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks: every relative link of README.md and docs/*.md names a
// file of the repository and, with a #fragment into a Markdown file, one of
// its headings (as GitHub makes anchors of them).
func TestDocsLinks(t *testing.T) {
	links := 0
	for _, d := range testenv.Docs(t) {
		for _, m := range mdLink.FindAllStringSubmatch(d.Text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, frag, _ := strings.Cut(target, "#")
			file := d.Path
			if path != "" {
				file = filepath.Join(filepath.Dir(d.Path), path)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: link %s: %v", d.Name, target, err)
				continue
			}
			if frag != "" && strings.HasSuffix(file, ".md") && !slices.Contains(anchors(t, file), frag) {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", d.Name, target, filepath.Base(file), frag)
			}
		}
	}
	if links < 50 {
		t.Errorf("control: only %d relative links found", links)
	}
}

// anchors returns the anchors GitHub gives the headings of a Markdown file:
// lower case, punctuation other than - and _ dropped, spaces as -.
func anchors(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fenced := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
