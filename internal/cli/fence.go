package cli

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/egress/gateway"
	"vak/internal/egress/ondemand"
	"vak/internal/launch"
	"vak/internal/paths"
	"vak/internal/sandbox"
)

func (a *app) newGatewayServeNativeCmd() *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:    launch.ServeNativeCommand,
		Hidden: true,
		Short:  "Serve the on-demand gateway of native proxied runs (started by vak run)",
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.serveNative(cmd.Context(), idle)
		},
	}
	cmd.Flags().DurationVar(&idle, "idle", ondemand.DefaultIdle, "stop after no run has used the gateway for this long")
	return cmd
}

// serveNative is `vak gateway serve-native` (gateway.ServeOnDemand) with
// the trusted user config.
func (a *app) serveNative(ctx context.Context, idle time.Duration) error {
	if idle <= 0 {
		return exit(ExitUsage, errors.New("--idle must be positive"))
	}
	load, cfgFile, err := config.GatewayLoader("", a.userConfig, a.warn)
	if err != nil {
		return exit(ExitConfig, err)
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return exit(ExitInternal, err)
	}
	o := gateway.OnDemandOptions{Load: load, ConfigFile: cfgFile, StateDir: state, Idle: idle, Out: a.stdio.Err}
	return exitFor(gateway.ServeOnDemand(ctx, o))
}

// stopOnDemandGateway is vak gc's part for native proxied runs
// (launch.StopOnDemandGateway).
func (a *app) stopOnDemandGateway(ctx context.Context) {
	launch.StopOnDemandGateway(ctx, a.stdio.Out, a.warn)
}

// proxiedHow says, for vak doctor, how b would attach a proxied network
// (launch.ProxiedHow).
func (a *app) proxiedHow(ctx context.Context, b sandbox.Backend) string {
	return launch.ProxiedHow(ctx, b)
}
