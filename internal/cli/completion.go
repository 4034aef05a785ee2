package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// completionShells are the shells `vak completion` writes a script for,
// with cobra's generator and how to install each script.
var completionShells = []struct {
	name, install string
	gen           func(root *cobra.Command, w io.Writer, desc bool) error
}{
	{
		name: "bash",
		install: `Needs the bash-completion package (Debian: apt install bash-completion;
macOS: brew install bash-completion@2).

In the current shell:

    source <(vak completion bash)

For every new shell, Linux:

    vak completion bash > /etc/bash_completion.d/vak

or only for you:

    mkdir -p ~/.local/share/bash-completion/completions
    vak completion bash > ~/.local/share/bash-completion/completions/vak

macOS (Homebrew):

    vak completion bash > $(brew --prefix)/etc/bash_completion.d/vak`,
		gen: func(root *cobra.Command, w io.Writer, desc bool) error { return root.GenBashCompletionV2(w, desc) },
	},
	{
		name: "zsh",
		install: `Completion must be enabled in zsh (compinit); if it is not yet:

    echo "autoload -U compinit; compinit" >> ~/.zshrc

In the current shell:

    source <(vak completion zsh)

For every new shell, write the script into a directory of $fpath:

    vak completion zsh > "${fpath[1]}/_vak"

(macOS with Homebrew: > $(brew --prefix)/share/zsh/site-functions/_vak)`,
		gen: func(root *cobra.Command, w io.Writer, desc bool) error {
			if desc {
				return root.GenZshCompletion(w)
			}
			return root.GenZshCompletionNoDesc(w)
		},
	},
	{
		name: "fish",
		install: `In the current shell:

    vak completion fish | source

For every new shell:

    vak completion fish > ~/.config/fish/completions/vak.fish`,
		gen: func(root *cobra.Command, w io.Writer, desc bool) error { return root.GenFishCompletion(w, desc) },
	},
}

// newCompletionCmd is `vak completion SHELL`: the shell completion script
// (cobra's generator), one subcommand per shell whose help says how to
// install it. Completion lists only the commands `vak --help` lists:
// cobra never completes hidden commands.
func (a *app) newCompletionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Print the shell completion script for bash, zsh or fish; load it in your
shell to complete vak's commands and flags with Tab. 'vak completion SHELL
--help' says how to install it, e.g. for the current bash:

    source <(vak completion bash)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(ExitUsage, fmt.Errorf("completion: name a shell: bash, zsh or fish (see 'vak completion --help')"))
		},
	}
	for _, sh := range completionShells {
		var noDesc bool
		sub := &cobra.Command{
			Use:   sh.name,
			Short: "Print the completion script for " + sh.name,
			Long:  "Print the completion script for " + sh.name + ".\n\n" + sh.install,
			Args:  cobra.NoArgs,
			// The script itself needs no completion.
			ValidArgsFunction: cobra.NoFileCompletions,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if err := sh.gen(cmd.Root(), a.stdio.Out, !noDesc); err != nil {
					return exit(ExitInternal, fmt.Errorf("completion %s: %w", sh.name, err))
				}
				return nil
			},
		}
		sub.Flags().BoolVar(&noDesc, "no-descriptions", false, "complete without the commands' and flags' descriptions")
		cmd.AddCommand(sub)
	}
	return cmd
}
