package cli

import (
	"os"

	"github.com/spf13/cobra"

	"vak/internal/worker"
)

// newWorkerRelayCmd is `vak __worker-relay SOCKET`, run in a session pod's
// worker container through the exec stream (worker.Relay).
func newWorkerRelayCmd() *cobra.Command {
	return &cobra.Command{
		Use:    worker.RelayCommand + " SOCKET",
		Short:  "Relay stdio to a session worker's socket (run by vak in a session pod)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := worker.Relay(args[0], os.Stdin, os.Stdout); err != nil {
				return exit(ExitUnavailable, err)
			}
			return nil
		},
	}
}

// newInstallWorkerCmd is `vak __install-worker DST`, a session pod's init
// container copying vak where the workload container runs it from.
func newInstallWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    worker.InstallCommand + " DST",
		Short:  "Copy this vak to DST (run by vak in a session pod's init container)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := worker.Install(args[0]); err != nil {
				return exit(ExitInternal, err)
			}
			return nil
		},
	}
}
