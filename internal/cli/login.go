package cli

import (
	"github.com/spf13/cobra"

	"vak/internal/launch"
)

// newLoginCmd is `vak login`: phantom login tokens (docs/agents.md).
func (a *app) newLoginCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "login", Short: "Bring subscription logins into the sandbox as phantom tokens (docs/agents.md)"}
	f, from := runFlags{}, ""
	imp := &cobra.Command{Use: "import claude|codex|gh", Short: "Move a host login into vak's login store and give the agent home its phantoms", Args: cobra.ExactArgs(1), ValidArgs: launch.LoginClients(),
		RunE: func(cmd *cobra.Command, args []string) error {
			ws, cfg, err := a.workspaceConfig(f)
			if err == nil {
				err = exitFor(launch.ImportLoginReport(cmd.Context(), a.stdio.Out, cfg, args[0], from, ws))
			}
			return err
		}}
	imp.Flags().StringVarP(&f.workspace, "workspace", "w", "", "workspace whose agent home gets the login (default: the current directory)")
	homeFlag(imp.Flags(), &f.home)
	imp.Flags().StringVar(&from, "from", "", "the login file (default: the CLI's file in your home)")
	ls := &cobra.Command{Use: "ls", Short: "List the logins kept in the login store (never a token)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return exitFor(launch.ListLoginsReport(a.stdio.Out)) }}
	rm := &cobra.Command{Use: "rm LOGIN", Short: "Forget a login's tokens (its phantoms stop working)", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, v []string) error { return exitFor(launch.RemoveLoginReport(a.stdio.Out, v[0])) }}
	cmd.AddCommand(imp, ls, rm)
	return cmd
}
