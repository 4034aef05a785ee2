package cli

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"

	"vak/internal/testenv"
)

// docCommand is one vak command line of a document, from the word vak on.
// An inline code span in prose may name a flag without its value
// (lenient); a line of a code block is a whole command.
type docCommand struct {
	file    string
	line    int
	text    string
	lenient bool
}

// vakWord finds the word vak used as a command (`vak ...`, `go run
// ./cmd/vak ...`), not as part of a path or a longer name.
var vakWord = regexp.MustCompile(`(^|[\s(])(go run \./cmd/)?vak(\s|$)`)

// inlineCode finds the inline code spans of a paragraph.
var inlineCode = regexp.MustCompile("`([^`]+)`")

// docCommands returns the vak command lines of a Markdown document: the
// lines of its shell code blocks (indented, or fenced as sh; an unlabeled
// fence holds diagrams, so only its lines that start with vak) and its
// inline code spans that start with vak.
func docCommands(file, doc string) []docCommand {
	var cmds []docCommand
	fence, fenced := "", false
	para, paraLine := "", 0
	flush := func() {
		for _, m := range inlineCode.FindAllStringSubmatchIndex(para, -1) {
			span := strings.ReplaceAll(para[m[2]:m[3]], "\n", " ")
			if cmd, ok := vakCommand(span, true); ok {
				cmds = append(cmds, docCommand{file, paraLine + strings.Count(para[:m[2]], "\n"), cmd, true})
			}
		}
		para = ""
	}
	for i, line := range strings.Split(doc, "\n") {
		if lang, ok := strings.CutPrefix(line, "```"); ok {
			flush()
			fence, fenced = lang, !fenced
			continue
		}
		code := (fenced && (fence == "sh" || fence == "")) || (!fenced && strings.HasPrefix(line, "    "))
		switch {
		case fenced && !code:
		case code:
			flush()
			if cmd, ok := vakCommand(line, fenced && fence == ""); ok {
				cmds = append(cmds, docCommand{file, i + 1, cmd, false})
			}
		case strings.TrimSpace(line) == "":
			flush()
		default:
			if para == "" {
				paraLine = i + 1
			}
			para += line + "\n"
		}
	}
	flush()
	return cmds
}

// vakCommand returns text from its vak word on, cut where the command ends
// (a comment, a closing parenthesis, `;`, `&&`). With atStart, only a text
// that starts with the command (or with `source <(` or `$(` before it)
// counts. The name given to a build's output (`-o vak`) and a message vak
// prints (`vak trace: ...`) are no commands.
func vakCommand(text string, atStart bool) (string, bool) {
	if i := strings.Index(text, "#"); i >= 0 {
		text = text[:i]
	}
	for _, m := range vakWord.FindAllStringSubmatchIndex(text, -1) {
		before := strings.TrimSpace(text[:m[3]])
		if strings.HasSuffix(before, "-o") || (atStart && !slices.Contains([]string{"", "$", "(", "<(", "$(", "source <("}, before)) {
			continue
		}
		cmd := text[m[3]:]
		cmd = cmd[strings.Index(cmd, "vak"):]
		for _, end := range []string{")", ";", "&&"} {
			if i := strings.Index(cmd, end); i >= 0 {
				cmd = cmd[:i]
			}
		}
		if f := strings.Fields(cmd); len(f) > 1 && strings.HasSuffix(f[1], ":") {
			continue
		}
		return strings.TrimSpace(cmd), true
	}
	return "", false
}

// synopsisWords splits a command line in the usage notation into words:
// brackets (optional parts) are dropped, as are a lone `|` between
// alternatives and an ellipsis; `a|b` stays one word (alternatives).
func synopsisWords(text string) []string {
	var words []string
	for _, w := range strings.Fields(strings.NewReplacer("[", " ", "]", " ").Replace(text)) {
		if w == "|" || w == "..." || w == "<" || w == ">" || strings.HasSuffix(w, "...") {
			continue
		}
		words = append(words, w)
	}
	return words
}

// checkSynopsis checks words against cmd: every subcommand (each of the
// alternatives `a|b`, `a/b`) exists below its parent, and every flag exists
// on the command it is given to (its own or inherited), with a value when
// it takes one unless lenient. Words after `--` are the sandboxed
// command's; an upper-case word is a placeholder; other words where no
// subcommand fits are arguments.
func checkSynopsis(cmd *cobra.Command, words []string, lenient bool) error {
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "--":
			return nil
		case strings.HasPrefix(w, "-"):
			n := 0
			for _, alt := range strings.Split(w, "/") {
				var err error
				if n, err = checkFlag(cmd, alt, words[i+1:], lenient); err != nil {
					return err
				}
			}
			i += n
		case isPlaceholder(w) || !cmd.HasSubCommands():
			// an argument
		default:
			for _, name := range strings.FieldsFunc(w, func(r rune) bool { return r == '|' || r == '/' }) {
				sub := child(cmd, name)
				if sub == nil {
					return fmt.Errorf("%s has no subcommand %q", cmd.CommandPath(), name)
				}
				if err := checkSynopsis(sub, words[i+1:], lenient); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return nil
}

// checkFlag checks the flag word w (`--name`, `--name=V`, `-x`, `-xy`)
// against cmd and returns how many of the following words are its value.
func checkFlag(cmd *cobra.Command, w string, next []string, lenient bool) (int, error) {
	if w == "--help" || w == "-h" {
		return 0, nil // cobra adds it to every command when it executes
	}
	if long, ok := strings.CutPrefix(w, "--"); ok {
		name, _, hasValue := strings.Cut(long, "=")
		f := cmd.Flag(name)
		if f == nil {
			return 0, fmt.Errorf("%s has no flag --%s", cmd.CommandPath(), name)
		}
		return valueWords(f.Value.Type(), hasValue, lenient, next, cmd, w)
	}
	short, _, hasValue := strings.Cut(w[1:], "=")
	for j, c := range short {
		f := cmd.Flags().ShorthandLookup(string(c))
		if f == nil {
			f = cmd.InheritedFlags().ShorthandLookup(string(c))
		}
		if f == nil {
			return 0, fmt.Errorf("%s has no flag -%c", cmd.CommandPath(), c)
		}
		if f.Value.Type() != "bool" && j < len(short)-1 {
			return 0, nil // -wDIR: the rest is the value
		}
		if j == len(short)-1 {
			return valueWords(f.Value.Type(), hasValue, lenient, next, cmd, w)
		}
	}
	return 0, nil
}

// valueWords says how many of next are the value of a flag of type typ
// given as w: none when it was given with `=`; a missing value is an error
// unless lenient (prose may name a flag alone).
func valueWords(typ string, hasValue, lenient bool, next []string, cmd *cobra.Command, w string) (int, error) {
	switch {
	case typ == "bool" || hasValue:
		return 0, nil
	case len(next) > 0 && next[0] != "--" && !strings.HasPrefix(next[0], "-"):
		return 1, nil
	case lenient:
		return 0, nil
	}
	return 0, fmt.Errorf("%s: flag %s takes a value and has none", cmd.CommandPath(), w)
}

// child is cmd's subcommand called name (or by an alias), or nil.
func child(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

// isPlaceholder says whether w stands for a value (DIR, FILE, ID,
// profile:NAME): it has an upper-case letter and no lower-case one before
// its first colon.
func isPlaceholder(w string) bool {
	if _, after, ok := strings.Cut(w, ":"); ok {
		w = after
	}
	return strings.IndexFunc(w, unicode.IsUpper) >= 0 && strings.IndexFunc(w, unicode.IsLower) < 0
}

// TestCheckSynopsis pins what checkSynopsis accepts and refuses, so that
// TestDocsCommands cannot pass by checking nothing.
func TestCheckSynopsis(t *testing.T) {
	for _, tc := range []struct {
		line, err string
	}{
		{"vak run [--workspace DIR] [--home fresh|workspace|profile:NAME] [-i] [-t] -- CMD [ARGS...]", ""},
		{"vak run -t=false -- sh", ""},
		{"vak session exec -it ID -- sh", ""},
		{"vak gc --homes | --home workspace|profile:NAME [--dry-run]", ""},
		{"vak completion bash|zsh|fish", ""},
		{"vak completion fish | source", ""},
		{"vak --config FILE doctor", ""},
		{"vak session create/exec/rm", ""},
		{"vak run --backend docker -i/-t", ""},
		{"vak completion SHELL --help", ""},
		{"vak session create/nope", `vak session has no subcommand "nope"`},
		{"vak run -i/-Q", "vak run has no flag -Q"},
		{"vak run --no-such-flag -- sh", "vak run has no flag --no-such-flag"},
		{"vak run -Q -- sh", "vak run has no flag -Q"},
		{"vak run --workspace -- sh", "flag --workspace takes a value"},
		{"vak sesion create", `vak has no subcommand "sesion"`},
		{"vak session create|nope ...", `vak session has no subcommand "nope"`},
		{"vak receipts verify|ls --no-key FILE", "vak receipts verify has no flag --no-key"},
		{"vak gateway [reload|frobnicate]", `vak gateway has no subcommand "frobnicate"`},
	} {
		cmd, _ := vakCommand(tc.line, false)
		err := checkSynopsis(fullTree(), synopsisWords(cmd)[1:], false)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.line, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.line, err, tc.err)
		}
	}
}

// TestDocsCommands parses every vak command line of README.md and
// docs/*.md (code blocks and inline code) against the real command tree:
// the subcommands and flags a document shows exist, and a flag that takes
// a value has one. README's first command is run by scripts/test-nonroot
// (in-process, TestRunDefaultBackend runs its equivalent); the documents'
// config examples are loaded by config.TestDocsTOMLParses.
func TestDocsCommands(t *testing.T) {
	perFile := map[string]int{}
	readme := ""
	for _, d := range testenv.Docs(t) {
		if d.Name == "README.md" {
			readme = d.Text
		}
		for _, c := range docCommands(d.Name, d.Text) {
			perFile[c.file]++
			if err := checkSynopsis(fullTree(), synopsisWords(c.text)[1:], c.lenient); err != nil {
				t.Errorf("%s:%d: %q: %v", c.file, c.line, c.text, err)
			}
		}
	}
	t.Logf("vak command lines checked per file: %v", perFile)
	// Control: README's usage summary and first command were found.
	if n := perFile["README.md"]; n < 20 {
		t.Errorf("found only %d vak command lines in README.md", n)
	}
	if !strings.Contains(readme, "\n    go run ./cmd/vak run -- sh -c '") {
		t.Error("README.md lost its first command (scripts/test-nonroot runs it)")
	}
}
