package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/agenthome"
	"vak/internal/config"
	"vak/internal/engine"
	"vak/internal/fsguard"
	"vak/internal/launch"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
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
	homeFlag(fl, &f.home)
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

	reg := registry(cfg, nil)
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
	for _, line := range describeLimits(cfg, b) {
		fmt.Fprintf(out, "limits: %s\n", line)
	}
	if cfg.Sandbox.Timeout > 0 {
		fmt.Fprintf(out, "timeout: %v\n", cfg.Sandbox.Timeout)
	}
	fmt.Fprintf(out, "protected paths: %v\n", cfg.Files.Protected)
	if cfg.Sandbox.Mode.Restricted() && ws != "" {
		fmt.Fprintf(out, "tripwire: %s\n", describeTripwire(ws))
	}
	fmt.Fprintf(out, "home: %s\n", describeHome(cfg, ws, res.Effective))
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
	fmt.Fprintf(out, "nested docker: %s\n", a.nestedDockerHow(ctx, cfg))
	if err := b.Available(ctx); err != nil {
		fmt.Fprintf(out, "\nthe effective backend cannot run: %v\n", err)
		return exit(ExitUnavailable, nil)
	}
	return nil
}

// describeLimits says, per limit, its value and what enforces it with the
// effective backend b (sandbox.LimitsDescriber).
func describeLimits(cfg *config.Config, b sandbox.Backend) []string {
	l := cfg.Sandbox.Limits.WithDefaults()
	if !cfg.Sandbox.Mode.Restricted() {
		return []string{"none (mode full-access: nothing is sandboxed)"}
	}
	if d, ok := b.(sandbox.LimitsDescriber); ok {
		return d.DescribeLimits(l)
	}
	return []string{fmt.Sprintf("memory %d MiB, cpus %g, pids %d, tmp %d MiB (the %s backend does not say how it enforces them)", l.Memory>>20, l.CPUs, l.Pids, l.TmpfsSize>>20, b.Name())}
}

// describeTripwire says how a long-lived worker checks the workspace
// around each command: kept current with inotify, or walked every time.
func describeTripwire(ws string) string {
	if err := fsguard.CheckWatch(ws); err != nil {
		return fmt.Sprintf("every command walks the workspace (no inotify watch: %v)", err)
	}
	return fmt.Sprintf("a session's worker keeps its walk current with inotify from its second command on (up to %d directories and hard-linked files: a quarter of fs.inotify.max_user_watches)", fsguard.WatchLimit())
}

func scopeOf(b sandbox.Backend) string {
	if b == nil {
		return "-"
	}
	return b.Scope().String()
}

// describeHome says which HOME a run would get: the choice, where it lives
// on the host and what it holds (nothing is created to say so).
func describeHome(cfg *config.Config, ws string, b sandbox.Name) string {
	h := cfg.Sandbox.Home
	switch {
	case !cfg.Sandbox.Mode.Restricted() || b == sandbox.None:
		return "your real home (mode full-access: nothing is sandboxed)"
	case h.Kind == agenthome.Fresh:
		return "fresh (an empty private home for each run)"
	case ws == "" && h.Kind == agenthome.Workspace:
		return h.String() + " (no usable workspace)"
	}
	home, _ := os.UserHomeDir()
	if err := launch.HomeTargetProblem(b, home); err != nil {
		if !cfg.Sandbox.HomeSet {
			return fmt.Sprintf("fresh (the default %s home cannot be placed: HOME is %q, one of the sandbox's own directories)", h, home)
		}
		return fmt.Sprintf("%s: runs fail: %v", h, err)
	}
	dir, err := agenthome.Dir(h, ws)
	if err != nil {
		return fmt.Sprintf("%s: %v", h, err)
	}
	seen := ""
	if b == sandbox.Docker {
		seen = ", seen as " + docker.PersistentHome + " in the container"
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("%s, kept in %s (not created yet%s)", h, dir, seen)
	case err != nil:
		return fmt.Sprintf("%s, kept in %s: %v", h, dir, err)
	case !fi.IsDir():
		return fmt.Sprintf("%s, kept in %s: not a directory (runs fail until it is removed)", h, dir)
	}
	u, err := (agenthome.Home{Choice: h, Dir: dir}).Usage()
	if err != nil {
		return fmt.Sprintf("%s, kept in %s (size unknown: %v%s)", h, dir, err, seen)
	}
	return fmt.Sprintf("%s, kept in %s (%s in %d entries%s)", h, dir, humanSize(u), u.Entries, seen)
}

// humanSize formats a home's usage.
func humanSize(u fsguard.Usage) string {
	s := fmt.Sprintf("%.1f MiB", float64(u.Bytes)/(1<<20))
	if u.Bytes < 1<<20 {
		s = fmt.Sprintf("%d KiB", u.Bytes>>10)
	}
	if u.Truncated {
		s = "more than " + s
	}
	return s
}

// nestedDockerHow describes what `vak session create --docker` would use
// for the sidecar here (dockerd.ChooseBaseline), or why it cannot tell.
func (a *app) nestedDockerHow(ctx context.Context, cfg *config.Config) string {
	on := "off by default (--docker)"
	if cfg.Session.Docker {
		on = "on for every session (session.docker)"
	}
	eng, err := engine.New()
	if err != nil {
		return on + "; sidecar baseline unknown: " + err.Error()
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, why, err := dockerBaseline(ctx, eng, cfg)
	if err != nil {
		return on + "; sidecar baseline: " + err.Error()
	}
	return on + "; sidecar baseline " + b.Describe() + ": " + why
}
