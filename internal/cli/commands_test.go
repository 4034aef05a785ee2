package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// userCommands are the commands users type, by path below vak: each
// parent's --help lists exactly its children among them, and shell
// completion offers exactly those.
var userCommands = []string{
	"agentnet", "agentnet edges", "agentnet reload", "agentnet revoke", "agentnet serve",
	"completion", "completion bash", "completion fish", "completion zsh",
	"devcontainer", "devcontainer doctor", "devcontainer down", "devcontainer init", "devcontainer prepare",
	"doctor",
	"gateway", "gateway allow", "gateway asks", "gateway deny", "gateway ca", "gateway env", "gateway import-sandcat", "gateway presets",
	"gateway reload", "gateway revoke", "gateway status",
	"gc",
	"help",
	"login", "login import", "login ls", "login rm",
	"mcp",
	"receipts", "receipts fetch", "receipts ls", "receipts verify",
	"run",
	"session", "session create", "session exec", "session gc", "session ls",
	"session pool", "session pool fill", "session pull", "session rm", "session snapshot", "session worker-image",
	"ui",
	"version",
}

// internalCommandPaths are the commands vak starts itself (in sandboxes,
// containers, detached processes): hidden from help and completion, still
// runnable.
var internalCommandPaths = []string{
	"__hashfiles", "__install-worker", "__keep-watch", "__pod-fence", "__reap", "__tar", "__untar", "__session-sweep", "__session-watch", "__worker", "__worker-relay",
	"dockerguard", "dockerguard ping",
	"gateway serve-native",
	"netclient", "netclient selftest", "netclient unfence",
}

// fullTree is the command tree of one invocation, with the help command
// cobra adds when it executes.
func fullTree() *cobra.Command {
	root := (&app{}).newRoot()
	root.InitDefaultHelpCmd()
	return root
}

// hiddenPath says whether cmd or one of its parents is hidden.
func hiddenPath(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Hidden {
			return true
		}
	}
	return false
}

// userChildren are the names of parent's children in userCommands
// (parent "" is the root).
func userChildren(parent string) []string {
	var names []string
	for _, p := range userCommands {
		dir, name := "", p
		if i := strings.LastIndexByte(p, ' '); i >= 0 {
			dir, name = p[:i], p[i+1:]
		}
		if dir == parent {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// TestCommandTree checks every command of the tree against the two tables
// above: a new command must say whether users type it; the user commands
// are visible, the internal ones hidden and still found.
func TestCommandTree(t *testing.T) {
	root := fullTree()
	want := map[string]bool{} // path -> hidden
	for _, p := range userCommands {
		want[p] = false
	}
	for _, p := range internalCommandPaths {
		want[p] = true
	}
	seen := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(parent *cobra.Command) {
		for _, c := range parent.Commands() {
			p := strings.TrimPrefix(c.CommandPath(), "vak ")
			seen[p] = true
			hidden, ok := want[p]
			switch {
			case !ok:
				t.Errorf("vak %s is in neither userCommands nor internalCommandPaths: users type it, or it is internal (Hidden: true)", p)
			case hidden != hiddenPath(c):
				t.Errorf("vak %s: hidden %v, want %v", p, hiddenPath(c), hidden)
			}
			walk(c)
		}
	}
	walk(root)
	for p := range want {
		if !seen[p] {
			t.Errorf("vak %s: no such command", p)
		}
	}
	// The internal commands still resolve and run.
	for _, p := range internalCommandPaths {
		c, rest, err := root.Find(strings.Fields(p))
		if err != nil || len(rest) != 0 || c.CommandPath() != "vak "+p || !c.Runnable() {
			t.Errorf("vak %s does not resolve to a runnable command: %v %q %v", p, c.CommandPath(), rest, err)
			continue
		}
		if c.DisableFlagParsing {
			continue // --help would be its argument
		}
		if code, out, errs := vakMain(t, "", append(strings.Fields(p), "--help")...); code != 0 || !strings.Contains(out, "vak "+p) {
			t.Errorf("vak %s --help: exit %d: %s%s", p, code, out, errs)
		}
	}
}

// availableCommands parses the "Available Commands:" section of a help text.
func availableCommands(help string) []string {
	_, sect, ok := strings.Cut(help, "Available Commands:\n")
	if !ok {
		return nil
	}
	var names []string
	for _, l := range strings.Split(sect, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			break
		}
		names = append(names, f[0])
	}
	slices.Sort(names)
	return names
}

// TestHelpListsUserCommands checks that `vak --help`, and the help of every
// user command with subcommands, lists exactly the user commands below it.
func TestHelpListsUserCommands(t *testing.T) {
	for _, parent := range append([]string{""}, userCommands...) {
		want := userChildren(parent)
		if len(want) == 0 {
			continue
		}
		code, out, errs := vakMain(t, "", append(strings.Fields(parent), "--help")...)
		if code != 0 {
			t.Fatalf("vak %s --help: exit %d: %s", parent, code, errs)
		}
		if got := availableCommands(out); !slices.Equal(got, want) {
			t.Errorf("vak %s --help lists %q, want %q:\n%s", parent, got, want, out)
		}
	}
}

// completions runs cobra's completion request (what the shell scripts
// run) through Main and returns the names it offers.
func completions(t *testing.T, words ...string) []string {
	t.Helper()
	code, out, errs := vakMain(t, "", append([]string{cobra.ShellCompRequestCmd}, words...)...)
	if code != 0 {
		t.Fatalf("vak __complete %q: exit %d: %s", words, code, errs)
	}
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if l == "" || strings.HasPrefix(l, ":") { // ":4" is the directive
			break
		}
		name, _, _ := strings.Cut(l, "\t")
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// TestCompletionOffersUserCommands checks what completion offers after
// every parent: exactly the user commands; each user command completes
// from its full name, no internal one does.
func TestCompletionOffersUserCommands(t *testing.T) {
	if got := completions(t, "ses"); !slices.Equal(got, []string{"session"}) {
		t.Fatalf("control: vak ses<TAB> offers %q, want [session]", got)
	}
	for _, parent := range append([]string{""}, userCommands...) {
		want := userChildren(parent)
		if len(want) == 0 {
			continue
		}
		if got := completions(t, append(strings.Fields(parent), "")...); !slices.Equal(got, want) {
			t.Errorf("vak %s <TAB> offers %q, want %q", parent, got, want)
		}
	}
	for _, p := range userCommands {
		f := strings.Fields(p)
		if got := completions(t, f...); !slices.Contains(got, f[len(f)-1]) {
			t.Errorf("vak %s<TAB> offers %q, not %s", p, got, f[len(f)-1])
		}
	}
	for _, p := range internalCommandPaths {
		f := strings.Fields(p)
		if got := completions(t, f...); len(got) != 0 {
			t.Errorf("vak %s<TAB> offers %q: an internal command is completed", p, got)
		}
	}
}

// TestCompletionScripts checks that `vak completion SHELL` writes each
// shell's script (with and without descriptions) and that its help says
// how to install it.
func TestCompletionScripts(t *testing.T) {
	for _, tc := range []struct {
		shell, marker string
		install       []string
	}{
		{"bash", "__start_vak", []string{"source <(vak completion bash)", "bash-completion", "vak completion bash > "}},
		{"zsh", "#compdef vak", []string{"source <(vak completion zsh)", "compinit", "/_vak"}},
		{"fish", "complete -c vak", []string{"vak completion fish | source", "vak completion fish > ~/.config/fish/completions/vak.fish"}},
	} {
		for _, args := range [][]string{{"completion", tc.shell}, {"completion", tc.shell, "--no-descriptions"}} {
			code, out, errs := vakMain(t, "", args...)
			if code != 0 || !strings.Contains(out, tc.marker) {
				t.Errorf("vak %s: exit %d, script without %q: %s\n%.300s", strings.Join(args, " "), code, tc.marker, errs, out)
			}
		}
		code, out, _ := vakMain(t, "", "completion", tc.shell, "--help")
		for _, want := range tc.install {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("vak completion %s --help: exit %d, lacks %q:\n%s", tc.shell, code, want, out)
			}
		}
	}
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "extra"}} {
		if code, _, errs := vakMain(t, "", args...); code != ExitUsage {
			t.Errorf("vak %s: exit %d, want %d: %s", strings.Join(args, " "), code, ExitUsage, errs)
		}
	}
	if code, out, _ := vakMain(t, "", "completion", "--help"); code != 0 || !strings.Contains(out, "source <(vak completion bash)") {
		t.Errorf("vak completion --help: exit %d:\n%s", code, out)
	}
}

// shellEnv is the environment of a shell that finds the built vak as
// `vak` on PATH.
func shellEnv(t *testing.T) []string {
	if filepath.Base(workerExecutable) != "vak" {
		t.Fatalf("the built vak is %s, not named vak", workerExecutable)
	}
	return append(os.Environ(), "PATH="+filepath.Dir(workerExecutable)+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// bashCompletionLib is the bash-completion package's library, which the
// bash script (cobra's) needs at Tab time.
const bashCompletionLib = "/usr/share/bash-completion/bash_completion"

// TestCompletionInBash loads the bash script into bash, and (with the
// bash-completion package installed) presses Tab: the completion function
// the script registers runs the built vak and offers the user commands,
// never an internal one.
func TestCompletionInBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	env := shellEnv(t)
	load := exec.Command(bash, "-c", "source <(vak completion bash) && complete -p vak")
	load.Env = env
	out, err := load.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-F __start_vak vak") {
		t.Fatalf("bash did not load the script: %v: %s", err, out)
	}
	if _, err := os.Stat(bashCompletionLib); err != nil {
		t.Skipf("no bash-completion package (%v): the script loads; Tab itself is not tried", err)
	}
	tab := func(line string) []string {
		t.Helper()
		script := `source ` + bashCompletionLib + ` && source <(vak completion bash) || exit 1
COMP_LINE=$1 COMP_POINT=${#1}
read -ra COMP_WORDS <<<"$1"
[[ $1 == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
__start_vak vak "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
for c in "${COMPREPLY[@]}"; do printf '%s\n' "${c%% *}"; done`
		cmd := exec.Command(bash, "-c", script, "bash", line)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("Tab after %q: %v: %s", line, err, out)
		}
		names := strings.Fields(string(out))
		slices.Sort(names)
		return names
	}
	if got := tab("vak ses"); !slices.Equal(got, []string{"session"}) {
		t.Fatalf("vak ses<TAB> offers %q, want [session]", got)
	}
	if got, want := tab("vak "), userChildren(""); !slices.Equal(got, want) {
		t.Errorf("vak <TAB> offers %q, want %q", got, want)
	}
	if got, want := tab("vak gateway "), userChildren("gateway"); !slices.Equal(got, want) {
		t.Errorf("vak gateway <TAB> offers %q, want %q", got, want)
	}
	for _, line := range []string{"vak net", "vak __", "vak gateway serve"} {
		if got := tab(line); len(got) != 0 {
			t.Errorf("%s<TAB> offers %q: an internal command is completed", line, got)
		}
	}
}

// TestCompletionInZshAndFish loads the zsh and fish scripts into those
// shells where they are installed (CI installs neither); fish also
// completes (complete -C), like Tab: the user commands, no internal one.
func TestCompletionInZshAndFish(t *testing.T) {
	for _, tc := range []struct{ shell, script string }{
		{"zsh", `autoload -U compinit && compinit -u -D && source <(vak completion zsh) && (( $+functions[_vak] ))`},
		{"fish", `vak completion fish | source; complete -C"vak ses"; echo ::; complete -C"vak "; echo ::; complete -C"vak net"; complete -C"vak __"`},
	} {
		t.Run(tc.shell, func(t *testing.T) {
			sh, err := exec.LookPath(tc.shell)
			if err != nil {
				t.Skipf("%s is not installed", tc.shell)
			}
			cmd := exec.Command(sh, "-c", tc.script)
			if tc.shell == "zsh" {
				cmd.Args = []string{sh, "-f", "-c", tc.script}
			}
			cmd.Env = shellEnv(t)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s did not load the script: %v: %s", tc.shell, err, out)
			}
			if tc.shell != "fish" {
				return
			}
			var offered [][]string
			for _, block := range strings.Split(string(out), "::\n") {
				var names []string
				for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
					if name, _, _ := strings.Cut(l, "\t"); name != "" {
						names = append(names, name)
					}
				}
				slices.Sort(names)
				offered = append(offered, names)
			}
			if len(offered) != 3 || !slices.Equal(offered[0], []string{"session"}) {
				t.Fatalf("fish: vak ses<TAB> does not offer session alone: %q", out)
			}
			if want := userChildren(""); !slices.Equal(offered[1], want) {
				t.Errorf("fish: vak <TAB> offers %q, want %q", offered[1], want)
			}
			if len(offered[2]) != 0 {
				t.Errorf("fish: vak net<TAB>, vak __<TAB> offer %q: an internal command is completed", offered[2])
			}
		})
	}
}
