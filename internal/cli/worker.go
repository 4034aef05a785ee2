package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"vak/internal/broker"
	"vak/internal/sandbox"
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
			code, err := runWorker(cmd, stage)
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

func runWorker(cmd *cobra.Command, stage int) (int, error) {
	spec, raw, err := worker.ReadSpec()
	if err != nil {
		return 0, err
	}
	// Each backend registered its own worker entry point (its re-exec
	// stages); this is only a lookup.
	entry, err := sandbox.LookupWorker(spec.Backend)
	if err != nil {
		return 0, err
	}
	out, err := entry(cmd.Context(), sandbox.WorkerStart{Stage: stage, Data: spec.Sandbox, RawSpec: raw})
	if err != nil || out.Exited {
		return out.Code, err
	}
	if err := worker.Run(cmd.Context(), spec, out, os.Stdin, os.Stdout); err != nil {
		return 0, err
	}
	return 0, nil
}
