// Package doctor builds vak doctor's report as data: the config files that
// apply, every backend's availability, the effective backend for a
// workspace and what a run would get there (limits, tripwire, home,
// network, nested Docker). The command line loads the config, prints the
// report and maps OK to its exit status.
package doctor

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"
	"time"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"

	"vak/internal/config"
	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/launch"
	"vak/internal/leanstage"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
	"vak/internal/taskenv"
	"vak/internal/version"
)

// Options are what a report is built from.
type Options struct {
	// Workspace is the canonical workspace, "" when WorkspaceErr says why
	// there is none.
	Workspace    string
	WorkspaceErr error
	// Config is the loaded config, the command line's flags applied.
	Config *config.Config
	// ProxiedHow says how a backend would attach a proxied network.
	ProxiedHow func(context.Context, sandbox.Backend) string
	// DockerBaseline chooses the nested Docker sidecar's baseline and says
	// why (dockerd.ChooseBaseline).
	DockerBaseline func(context.Context, *engine.Client, *config.Config) (dockerd.Baseline, string, error)
}

// Backend is one backend's line: its name, scope and status.
type Backend struct {
	Name          sandbox.Name
	Scope, Status string
}

// Line is one "key: value" line of the effective backend's part.
type Line struct{ Key, Value string }

// Report is vak doctor's report.
type Report struct {
	Version, Platform string // vak's build-time version, GOOS/GOARCH
	Workspace         string
	WorkspaceErr      error
	Sources           []config.Source
	Warnings          []string
	Backends          []Backend // every backend but auto
	Mode              sandbox.Mode
	Lines             []Line // the effective backend and what a run gets
	// OK says the effective backend can run; Problem says why not when
	// one was resolved but is unavailable.
	OK      bool
	Problem error
}

// Build builds the report (it probes the backends and the Docker Engine).
func Build(ctx context.Context, o Options) *Report {
	cfg := o.Config
	r := &Report{
		Version: version.Version, Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Workspace: o.Workspace, WorkspaceErr: o.WorkspaceErr,
		Sources: cfg.Sources, Warnings: cfg.Warnings, Mode: cfg.Sandbox.Mode,
	}
	reg := launch.Registry(cfg, nil)
	r.Backends = backends(ctx, reg)
	b, res, err := reg.Resolve(cfg.Sandbox.Backend, cfg.Sandbox.Mode)
	if err != nil {
		r.add("effective backend", fmt.Sprintf("none can run: %v", err))
		return r
	}
	r.add("effective backend", fmt.Sprintf("%s (requested %s: %s)", res.Effective, res.Requested, res.Reason))
	if res.Effective == sandbox.Docker {
		r.add("image", fmt.Sprintf("%s, user: %s", cfg.Sandbox.Image, cfg.Sandbox.User))
	}
	if res.Effective == sandbox.Landlock {
		r.add("stage program", describeStageProgram())
	}
	for _, line := range describeLimits(cfg, b) {
		r.add("limits", line)
	}
	if cfg.Sandbox.Timeout > 0 {
		r.add("timeout", cfg.Sandbox.Timeout.String())
	}
	r.add("protected paths", fmt.Sprint(cfg.Files.Protected))
	if cfg.Sandbox.Mode.Restricted() && o.Workspace != "" {
		r.add("tripwire", describeTripwire(o.Workspace))
	}
	r.add("home", describeHome(cfg, o.Workspace, res.Effective))
	r.network(ctx, o, b)
	r.add("nested docker", nestedDockerHow(ctx, o))
	if rt := cfg.Sandbox.Runtime; rt != "" && cfg.Session.Backend != launch.BackendKubernetes {
		r.add("docker sessions", sessionRuntimeHow(ctx, cfg))
	} else if rt == "" {
		if how := engineDefaultHow(ctx); how != "" {
			r.add("docker runtime", how)
		}
	}
	if k := launch.KubeDoctor(ctx, cfg); k != "" {
		r.add("kubernetes sessions", k)
	}
	r.Problem = b.Available(ctx)
	r.OK = r.Problem == nil
	return r
}

// describeStageProgram says which program a landlock sandbox's stages run
// (package leanstage).
func describeStageProgram() string {
	if n := leanstage.Embedded(); n > 0 {
		return fmt.Sprintf("the lean stage program embedded in vak (%.1f MiB, run from a sealed memfd): each stage starts in about half the time vak itself takes", float64(n)/(1<<20))
	}
	return "vak itself: this vak was built without the lean stage program (plain go build or go install), so each sandbox start runs the whole binary twice more; the restrictions are the same, the start slower. Build with scripts/build-vak for the faster start"
}

func (r *Report) add(key, value string) { r.Lines = append(r.Lines, Line{key, value}) }

// backends probes every backend of reg but auto.
func backends(ctx context.Context, reg *sandbox.Registry) []Backend {
	var out []Backend
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
		out = append(out, Backend{Name: n, Scope: scopeOf(b), Status: status})
	}
	return out
}

func scopeOf(b sandbox.Backend) string {
	if b == nil {
		return "-"
	}
	return b.Scope().String()
}

// network adds the network policy's lines for the effective backend b.
func (r *Report) network(ctx context.Context, o Options, b sandbox.Backend) {
	cfg := o.Config
	switch netPolicy := cfg.Network; {
	case cfg.Sandbox.Mode == sandbox.FullAccess:
		r.add("network", "unrestricted (mode full-access)")
	case netPolicy == sandbox.NetworkProxied && cfg.Egress != nil:
		r.add("network", fmt.Sprintf("proxied through vak's gateway (%d rule(s), %d secret(s); %s)", cfg.Egress.Policy.Len(), len(cfg.Egress.Secrets), o.ProxiedHow(ctx, b)))
		r.add("gateway upstream roots", fmt.Sprint(proxynet.UpstreamRoots("", cfg.Egress.Gateway.ExtraCABundles)))
	case netPolicy == sandbox.NetworkProxied:
		r.add("network", "proxied requested, but the user config has no [network] rules: proxied commands fail")
	default:
		r.add("network", "none")
	}
}

// nestedDockerHow describes what `vak session create --docker` would use
// for the sidecar here (o.DockerBaseline), or why it cannot tell.
func nestedDockerHow(ctx context.Context, o Options) string {
	on := "off by default (--docker)"
	if o.Config.Session.Docker {
		on = "on for every session (session.docker)"
	}
	eng, err := engine.New()
	if err != nil {
		return on + "; sidecar baseline unknown: " + err.Error()
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, why, err := o.DockerBaseline(ctx, eng, o.Config)
	if err != nil {
		return on + "; sidecar baseline: " + err.Error()
	}
	return on + "; sidecar baseline " + b.Describe() + ": " + why
}

// sessionRuntimeHow says whether docker sessions can run under
// sandbox.runtime here, and be snapshotted (taskenv.CheckRuntime and
// SnapshotsUnder on the Engine's own description of the runtime).
func sessionRuntimeHow(ctx context.Context, cfg *config.Config) string {
	name := cfg.Sandbox.Runtime
	info, err := engineInfo(ctx)
	if err != nil {
		return "runtime " + name + ": unknown: " + err.Error()
	}
	rt, err := taskenv.CheckRuntime(info, name, cfg.Network)
	if err != nil {
		return "runtime " + name + ": refused: " + err.Error()
	}
	if !rt.GVisor() {
		return "runtime " + name + " (runc)"
	}
	snap := "snapshots too (--overlay2=none)"
	if err := taskenv.SnapshotsUnder(rt); err != nil {
		snap = "snapshots refused: " + err.Error()
	}
	return "runtime " + name + " (gVisor, --host-uds=create: the worker's socket is reached from the host; mounts identified by their attributes); " + snap
}

// engineInfo is the Engine's `docker info`, asked with doctor's timeout.
func engineInfo(ctx context.Context) (system.Info, error) {
	eng, err := engine.New()
	if err != nil {
		return system.Info{}, err
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := eng.Info(ctx, client.InfoOptions{})
	if err != nil {
		return system.Info{}, engine.APIError("docker info", err)
	}
	return res.Info, nil
}

// engineDefaultHow is defaultRuntimeHow of the Engine's default runtime;
// "" also when the Engine cannot be asked (the backends' lines say why).
func engineDefaultHow(ctx context.Context) string {
	info, err := engineInfo(ctx)
	if err != nil {
		return ""
	}
	return defaultRuntimeHow(info.DefaultRuntime)
}

// defaultRuntimeHow says, when the Engine's default runtime (def) is not
// runc, that vak's containers still run under runc (they name
// engine.DefaultRuntime) and how to choose the Engine's; "" when it is.
func defaultRuntimeHow(def string) string {
	if def == "" || def == engine.DefaultRuntime {
		return ""
	}
	return fmt.Sprintf("%s: vak names it on every container it creates; the Engine's default runtime, %q, is not used unless sandbox.runtime names it", engine.DefaultRuntime, def)
}

// Print writes the report as vak doctor shows it.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "vak %s on %s\n\n", r.Version, r.Platform)
	if r.WorkspaceErr != nil {
		fmt.Fprintf(w, "workspace: %v\n", r.WorkspaceErr)
	} else {
		fmt.Fprintf(w, "workspace: %s\n", r.Workspace)
	}
	fmt.Fprintln(w, "config files (applied in order):")
	for _, s := range r.Sources {
		trust, state := "untrusted", "not present"
		if s.Trusted {
			trust = "trusted"
		}
		if s.Exists {
			state = "loaded"
		}
		fmt.Fprintf(w, "  %s (%s): %s\n", s.Path, trust, state)
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintln(w, "config warnings:")
		for _, s := range r.Warnings {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	fmt.Fprintln(w, "\nbackends:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, b := range r.Backends {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", b.Name, b.Scope, b.Status)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nmode: %s\n", r.Mode)
	for _, l := range r.Lines {
		fmt.Fprintf(w, "%s: %s\n", l.Key, l.Value)
	}
	if r.Problem != nil {
		fmt.Fprintf(w, "\nthe effective backend cannot run: %v\n", r.Problem)
	}
}
