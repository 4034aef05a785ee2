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
	o := gateway.OnDemandOptions{Load: load, ConfigFile: cfgFile, Idle: idle, Out: a.stdio.Err}
	return exitFor(gateway.ServeOnDemand(ctx, o))
}
