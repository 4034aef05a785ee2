package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"vak/internal/broker"
	"vak/internal/worker"
)

// newWorkerCmd is the hidden entry point of the re-executed worker. It reads
// its spec from fd 3, restricts itself as the backend requires, and serves
// the worker protocol on stdin/stdout.
func (a *app) newWorkerCmd() *cobra.Command {
	var stage int
	var container bool
	cmd := &cobra.Command{
		Use:    broker.WorkerCommand,
		Short:  "Serve the worker protocol (started by vak itself)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if container {
				return runContainerWorker(cmd)
			}
			code, err := worker.Main(cmd.Context(), stage, os.Stdin, os.Stdout)
			if err != nil {
				return exit(ExitInternal, fmt.Errorf("worker: %w", err))
			}
			return exit(code, nil)
		},
	}
	cmd.Flags().IntVar(&stage, "stage", 1, "sandbox stage (1: namespaces and view, 2: self-restriction)")
	cmd.Flags().BoolVar(&container, "container", false, "be a session container's entrypoint (spec in $"+worker.SpecEnv+")")
	return cmd
}
