package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/egress/admin"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/gateway"
	"vak/internal/egress/ondemand"
	"vak/internal/egress/proxy"
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

// serveNative is `vak gateway serve-native`: the gateway with its
// transparent and DNS listeners on unix sockets of the on-demand directory,
// no TCP listener at all, until it has been idle (no run holding its
// lease) for idle, or SIGTERM (vak gc).
func (a *app) serveNative(ctx context.Context, idle time.Duration) error {
	if idle <= 0 {
		return exit(ExitUsage, errors.New("--idle must be positive"))
	}
	load, cfgFile, err := a.gatewayLoader("")
	if err != nil {
		return exit(ExitConfig, err)
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return exit(ExitInternal, err)
	}
	p := ondemand.Layout(state)
	g, err := gateway.New(gateway.Options{
		Load:              load,
		ConfigFile:        cfgFile,
		StateDir:          state,
		Listen:            "-",
		TransparentListen: gateway.UnixPrefix + p.Data,
		TransparentMode:   proxy.ProxyProtocol,
		DNSListen:         gateway.UnixPrefix + p.DNS,
		AdminSocket:       p.Admin,
		HandleSIGHUP:      true,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(a.stdio.Err, "%s vak gateway: "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339)}, args...)...)
		},
	})
	if err != nil {
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, egressconfig.ErrInvalid) {
			return exit(ExitConfig, err)
		}
		return exit(ExitUnavailable, err)
	}
	if err := ondemand.WritePID(p); err != nil {
		g.Close()
		return exit(ExitInternal, err)
	}
	st := g.Status().(gateway.Status)
	fmt.Fprintf(a.stdio.Err, "vak gateway: on-demand session %s, %d rule(s), %d secret(s); sockets in %s; stops after %v unused\n", st.Session, st.Rules, len(st.Secrets), p.Dir, idle)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		poll := min(max(idle/4, 10*time.Millisecond), 5*time.Second)
		if ondemand.WaitIdle(ctx, p, idle, poll) != nil {
			// The lease stays locked until this process exits.
			fmt.Fprintf(a.stdio.Err, "vak gateway: unused for %v, stopping\n", idle)
			cancel()
		}
	}()
	if err := g.Run(ctx); err != nil {
		return exit(ExitFailure, err)
	}
	return nil
}

// stopOnDemandGateway is vak gc's part for native proxied runs: it stops
// the user's on-demand gateway unless a run holds it.
func (a *app) stopOnDemandGateway(ctx context.Context) {
	state, err := paths.StateDir()
	if err != nil {
		return
	}
	stopped, err := ondemand.Stop(ctx, state)
	switch {
	case errors.Is(err, ondemand.ErrInUse):
	case err != nil:
		a.warnf("on-demand gateway: %v", err)
	case stopped:
		fmt.Fprintf(a.stdio.Out, "stopped the on-demand gateway of native proxied runs: no run uses it\n")
	}
}

// proxiedHow says, for vak doctor, how b would attach a proxied network and
// the state of the on-demand gateway a fence would use.
func (a *app) proxiedHow(ctx context.Context, b sandbox.Backend) string {
	kind, err := sandbox.ProxiedNetwork(b)
	if err != nil {
		return err.Error()
	}
	if kind == sandbox.NetworkTopology {
		return "the workspace's Docker topology"
	}
	state, err := paths.StateDir()
	if err != nil {
		return "a fenced namespace toward the on-demand gateway: " + err.Error()
	}
	p := ondemand.Layout(state)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := admin.NewClient(p.Admin).Status(ctx); err != nil {
		return "a fenced namespace toward the on-demand gateway in " + p.Dir + ", not running: the next proxied run starts it"
	}
	return "a fenced namespace toward the on-demand gateway in " + p.Dir + ", running"
}
