package cli

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"vak/internal/broker"
	"vak/internal/sandbox"
	"vak/internal/sandbox/landlock"
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
	desc := "none: full access, nothing is sandboxed"
	switch spec.Backend {
	case string(sandbox.Landlock):
		if spec.Landlock == nil {
			return 0, fmt.Errorf("landlock spec without policy")
		}
		if stage == 1 && spec.Namespaces {
			return landlock.Stage1(*spec.Landlock, raw, []string{"vak", broker.WorkerCommand, "--stage", strconv.Itoa(2)})
		}
		if desc, err = landlock.Stage2(*spec.Landlock, spec.Namespaces); err != nil {
			return 0, err
		}
	case string(sandbox.Seatbelt):
		desc = "seatbelt: sandbox-exec with a generated deny-by-default profile"
	case string(sandbox.Docker):
		desc = "docker: host-side worker; each bash command runs in its own container"
	case string(sandbox.None):
	default:
		return 0, fmt.Errorf("unknown backend %q", spec.Backend)
	}
	if err := worker.Run(cmd.Context(), spec, desc, os.Stdin, os.Stdout); err != nil {
		return 0, err
	}
	return 0, nil
}
