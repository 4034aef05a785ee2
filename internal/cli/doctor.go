package cli

import (
	"context"

	"github.com/spf13/cobra"

	"vak/internal/doctor"
	"vak/internal/launch"
	"vak/internal/paths"
)

func (a *app) newDoctorCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show which sandbox backends work here and which one vak would use",
		Long: `Show each sandbox backend's availability and why, the effective backend for
the workspace, and the config files that produced it.

Exits 0 when the effective backend can run, 69 when it cannot, 78 when a
config file is invalid.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.doctor(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.workspace, "workspace", "w", "", "workspace directory (default: current directory)")
	fl.StringVar(&f.mode, "mode", "", "sandbox mode to resolve for")
	fl.StringVar(&f.backend, "backend", "", "backend to resolve")
	fl.StringVar(&f.runtime, "runtime", "", "the docker backend's runtime to check (default from config: sandbox.runtime)")
	fl.StringVar(&f.network, "network", "", "network policy to show (none or proxied)")
	homeFlag(fl, &f.home)
	return cmd
}

// doctor prints doctor.Build's report for the config f resolves to.
func (a *app) doctor(ctx context.Context, f runFlags) error {
	wsArg := f.workspace
	if wsArg == "" {
		wsArg = "."
	}
	ws, wsErr := paths.CanonicalWorkspace(wsArg)
	if wsErr != nil {
		ws = ""
	}
	cfg, err := a.loadConfig(ws)
	if err != nil {
		return err
	}
	if err := applyFlags(cfg, f); err != nil {
		return exit(ExitUsage, err)
	}
	r := doctor.Build(ctx, doctor.Options{Workspace: ws, WorkspaceErr: wsErr, Config: cfg, ProxiedHow: launch.ProxiedHow, DockerBaseline: launch.DockerBaseline})
	r.Print(a.stdio.Out)
	if !r.OK {
		return exit(ExitUnavailable, nil)
	}
	return nil
}
