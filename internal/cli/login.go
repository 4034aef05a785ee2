package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"vak/internal/egress/logins"
	"vak/internal/launch"
)

func (a *app) newLoginCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Bring subscription logins into the sandbox as phantom tokens",
		Long: `Logins whose tokens the sandbox never holds ([logins] in the user config,
docs/agents.md). A login done inside 'vak run --network proxied' needs
nothing here: the gateway turns the token response's tokens into phantoms.
'vak login import' brings a login you already have on the host instead.`,
	}
	cmd.AddCommand(a.newLoginImportCmd(), a.newLoginLsCmd(), a.newLoginRmCmd())
	return cmd
}

func (a *app) newLoginImportCmd() *cobra.Command {
	var f runFlags
	var from string
	var clients []string
	for _, c := range logins.Clients {
		clients = append(clients, c.Name)
	}
	cmd := &cobra.Command{
		Use:   "import " + strings.Join(clients, "|"),
		Short: "Move a host login into vak and give the agent home its phantoms",
		Long: `Import the login a CLI keeps on this host (claude: ~/.claude/.credentials.json;
codex: ~/.codex/auth.json; gh: ~/.config/gh/hosts.yml; or --from FILE): its
tokens go into the gateway's login store (logins.json in vak's state
directory, 0600), and the agent home of the workspace (--home, default from
config; a kept home: workspace or profile:NAME) gets the same file with
phantoms in place of the tokens, so 'vak run --network proxied -- claude'
starts logged in without a real token in the sandbox. The user config
needs the matching [logins] entry (provider = "anthropic", "openai" or
"github"). A running gateway picks the tokens up at once. The file on the
host is left as it is: remove it if the login should live only in vak.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: clients,
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, cfg, err := a.workspaceConfig(f)
			if err != nil {
				return err
			}
			res, err := launch.ImportLogin(cmd.Context(), cfg, args[0], from, ws)
			if err != nil {
				return exitFor(err)
			}
			fmt.Fprintf(a.stdio.Out, "imported %d token(s) of login %s into %s\nphantom login written to %s\n", res.Tokens, res.Login, res.Store, res.HomeFile)
			if res.Reloaded {
				fmt.Fprintln(a.stdio.Out, "the running gateway reloaded")
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.workspace, "workspace", "w", "", "workspace whose agent home gets the login (default: the current directory)")
	homeFlag(fl, &f.home)
	fl.StringVar(&from, "from", "", "the login file to import (default: the CLI's file in your home)")
	return cmd
}

func (a *app) newLoginLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the logins in the gateway's login store (never a token)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path, list, err := launch.ListLogins()
			if err != nil {
				return exitFor(err)
			}
			if len(list) == 0 {
				fmt.Fprintf(a.stdio.Out, "no login in %s\n", path)
				return nil
			}
			tw := tabwriter.NewWriter(a.stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LOGIN\tTOKENS KEPT")
			for _, e := range list {
				var parts []string
				for _, f := range slices.Sorted(maps.Keys(e.Fields)) {
					parts = append(parts, fmt.Sprintf("%s %d", f, e.Fields[f]))
				}
				fmt.Fprintf(tw, "%s\t%s\n", e.Login, strings.Join(parts, ", "))
			}
			return tw.Flush()
		},
	}
}

func (a *app) newLoginRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm LOGIN",
		Short: "Forget a login's tokens (the sandbox's phantoms of it stop working)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := launch.RemoveLogin(cmd.Context(), args[0])
			if err != nil {
				return exitFor(err)
			}
			fmt.Fprintf(a.stdio.Out, "removed %d token(s) of login %s\n", n, args[0])
			return nil
		},
	}
}
