package cli

import (
	"github.com/spf13/cobra"

	"vak/internal/taskenv"
)

// newHashFilesCmd is `vak __hashfiles`: run by the broker inside a session
// container (as the worker binary) to hash the files a snapshot holds.
func (a *app) newHashFilesCmd() *cobra.Command {
	return &cobra.Command{
		Use:    taskenv.HashFilesCommand,
		Short:  "Hash the NUL-separated paths on stdin (snapshot content digests)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := taskenv.HashFiles(a.stdio.In, a.stdio.Out); err != nil {
				return exit(ExitFailure, err)
			}
			return nil
		},
	}
}
