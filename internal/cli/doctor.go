package cli

import (
	"context"
	"fmt"
	"runtime"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
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
	fl.StringVar(&f.network, "network", "", "network policy to show (none or proxied)")
	return cmd
}

func (a *app) doctor(ctx context.Context, f runFlags) error {
	out := a.stdio.Out
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
	fmt.Fprintf(out, "vak %s on %s/%s\n\n", Version, runtime.GOOS, runtime.GOARCH)
	if wsErr != nil {
		fmt.Fprintf(out, "workspace: %v\n", wsErr)
	} else {
		fmt.Fprintf(out, "workspace: %s\n", ws)
	}
	fmt.Fprintln(out, "config files (applied in order):")
	for _, s := range cfg.Sources {
		trust, state := "untrusted", "not present"
		if s.Trusted {
			trust = "trusted"
		}
		if s.Exists {
			state = "loaded"
		}
		fmt.Fprintf(out, "  %s (%s): %s\n", s.Path, trust, state)
	}
	if len(cfg.Warnings) > 0 {
		fmt.Fprintln(out, "config warnings:")
		for _, w := range cfg.Warnings {
			fmt.Fprintf(out, "  %s\n", w)
		}
	}

	reg := registry(cfg)
	fmt.Fprintln(out, "\nbackends:")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, n := range sandbox.Names {
		if n == sandbox.Auto {
			continue
		}
		status := "available"
		b, err := reg.Get(n)
		if err == nil {
			err = b.Available(ctx)
		}
		switch {
		case err != nil:
			status = "unavailable: " + err.Error()
		case n == sandbox.None:
			status = "available (only with mode full-access: no isolation)"
		default:
			if d, ok := b.(sandbox.Describer); ok {
				if more := d.Describe(ctx); more != "" {
					status += " " + more
				}
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", n, scopeOf(b), status)
	}
	tw.Flush()

	fmt.Fprintln(out)
	b, res, err := reg.Resolve(cfg.Sandbox.Backend, cfg.Sandbox.Mode)
	fmt.Fprintf(out, "mode: %s\n", cfg.Sandbox.Mode)
	if err != nil {
		fmt.Fprintf(out, "effective backend: none can run: %v\n", err)
		return exit(ExitUnavailable, nil)
	}
	fmt.Fprintf(out, "effective backend: %s (requested %s: %s)\n", res.Effective, res.Requested, res.Reason)
	if res.Effective == sandbox.Docker {
		fmt.Fprintf(out, "image: %s, user: %s\n", cfg.Sandbox.Image, cfg.Sandbox.User)
	}
	l := cfg.Sandbox.Limits
	fmt.Fprintf(out, "limits: memory %d MiB, cpus %g, pids %d, tmp %d MiB\n", l.Memory>>20, l.CPUs, l.Pids, l.TmpfsSize>>20)
	if cfg.Sandbox.Timeout > 0 {
		fmt.Fprintf(out, "timeout: %v\n", cfg.Sandbox.Timeout)
	}
	fmt.Fprintf(out, "protected paths: %v\n", cfg.Files.Protected)
	{
		switch netPolicy := cfg.Network; {
		case cfg.Sandbox.Mode == sandbox.FullAccess:
			fmt.Fprintln(out, "network: unrestricted (mode full-access)")
		case netPolicy == sandbox.NetworkProxied && cfg.Egress != nil:
			fmt.Fprintf(out, "network: proxied through vak's gateway (%d rule(s), %d secret(s); %s)\n", cfg.Egress.Policy.Len(), len(cfg.Egress.Secrets), a.proxiedHow(ctx, b))
			fmt.Fprintf(out, "gateway upstream roots: %s\n", proxynet.UpstreamRoots("", cfg.Egress.Gateway.ExtraCABundles))
		case netPolicy == sandbox.NetworkProxied:
			fmt.Fprintln(out, "network: proxied requested, but the user config has no [network] rules: proxied commands fail")
		default:
			fmt.Fprintln(out, "network: none")
		}
	}
	if err := b.Available(ctx); err != nil {
		fmt.Fprintf(out, "\nthe effective backend cannot run: %v\n", err)
		return exit(ExitUnavailable, nil)
	}
	return nil
}

func scopeOf(b sandbox.Backend) string {
	if b == nil {
		return "-"
	}
	return b.Scope().String()
}
