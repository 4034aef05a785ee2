package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"vak/internal/version"
)

func (a *app) newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print vak's version and the revision it was built from",
		Long: `Print vak's version and what its build info records: the main module's
version, the VCS revision and commit time it was built from, and whether the
tree had uncommitted changes ("modified"). Go records them when it builds in
a git clone; a binary built without them (-buildvcs=false, a test binary, a
build outside a clone or in a git worktree, whose .git is a file) says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version.Current()
			if asJSON {
				b, err := json.Marshal(v)
				if err != nil {
					return exit(ExitInternal, fmt.Errorf("version: %w", err))
				}
				fmt.Fprintf(a.stdio.Out, "%s\n", b)
				return nil
			}
			fmt.Fprintln(a.stdio.Out, v)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the fields as one JSON object")
	return cmd
}
