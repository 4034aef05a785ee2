package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/config"
	"vak/internal/egress/logins"
	"vak/internal/engine"
	"vak/internal/netfence"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
	"vak/internal/trace"
)

// attach attaches the proxied network when the config asks for one and
// the mode restricts the sandbox: the backend says how (a fence or the
// workspace's topology).
func (r *Run) attach(ctx context.Context) error {
	cfg := r.req.Config
	if r.req.NoNetwork || cfg.Network != sandbox.NetworkProxied || !cfg.Sandbox.Mode.Restricted() {
		return nil
	}
	kind, err := sandbox.ProxiedNetwork(r.Backend)
	if err != nil {
		return fmt.Errorf("%w; %w", err, ErrUnavailable)
	}
	tr := trace.From(ctx)
	if kind == sandbox.NetworkFence {
		end := tr.Begin("proxied network: on-demand gateway")
		att, admin, release, err := fence(ctx, r.req)
		if err != nil {
			return fmt.Errorf("proxied network: %w; %w", err, ErrUnavailable)
		}
		if cfg.Egress != nil && cfg.Egress.Ask {
			r.AskSocket = admin
		}
		end()
		r.Network = att
		r.defers(release)
		return nil
	}
	topo := TopologyFor(r.req)
	ws, idle := r.req.Workspace, r.req.NetworkIdle
	if idle > 0 {
		// Warm: the next run reuses the topology (Ensure checks its
		// health and recreates it if needed).
		topo.KeepWarm(ws, idle)
	}
	end := tr.Begin("proxied network: topology")
	att, done, err := topo.Acquire(ctx, ws, false)
	if err != nil {
		return fmt.Errorf("proxied network: %w; %w", err, ErrUnavailable)
	}
	end()
	r.Network = att
	// The run holds the network (its lease) until its sandbox is gone: no
	// gc or other run removes it before.
	r.defers(func() {
		defer tr.Begin("proxied network: release")()
		done()
		if idle <= 0 {
			topo.Release(context.Background(), ws)
			return
		}
		topo.KeepWarm(ws, idle)
		topo.GC(context.Background())
	})
	return nil
}

// Topology brings up, keeps and releases workspaces' proxied Docker
// topologies (proxynet) for runs, MCP servers and sessions alike.
type Topology struct {
	// Config is the loaded config (nil: the topology can only be released
	// and collected, as `vak session rm` does without one).
	Config *config.Config
	// Labels go on the topology's resources (tests: vak.test=1).
	Labels map[string]string
	// Executable is the static Linux vak the gateway image is built from
	// when the config names no session.worker; empty means this program.
	Executable string
	// Warn and Progress are as in Request.
	Warn     func(string)
	Progress io.Writer
}

// TopologyFor is the Topology of req's workspace network.
func TopologyFor(req Request) Topology {
	return Topology{Config: req.Config, Labels: req.Labels, Executable: req.Executable, Warn: req.Warn, Progress: req.Progress}
}

// Acquire brings up the proxied network of workspace ws (reusing a running
// one). done lets go of the caller's hold on the network (its lease:
// nothing removes it before), to be called once the sandbox containers
// that use it exist, or are gone. nested asks for netfence nested mode
// (nested Docker). It has the signature of taskenv.Manager.ProxyNet.
func (t Topology) Acquire(ctx context.Context, ws string, nested bool) (*sandbox.NetworkAttachment, func(), error) {
	o, err := t.options()
	if err != nil {
		return nil, nil, err
	}
	o.Workspace = ws
	if nested {
		o.NestedPool = netfence.DefaultNestedPool
	}
	n, err := proxynet.Ensure(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	return n.Attachment(), n.Release, nil
}

// options are the proxynet options of t's config.
func (t Topology) options() (proxynet.Options, error) {
	if t.Config == nil {
		return proxynet.Options{}, fmt.Errorf("%w: no config to build the proxied network from", ErrUnavailable)
	}
	eng, err := engine.New()
	if err != nil {
		return proxynet.Options{}, err
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return proxynet.Options{}, err
	}
	bin := t.Config.Session.Worker
	if bin == "" {
		bin = t.Executable
	}
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return proxynet.Options{}, err
		}
	}
	return proxynet.Options{Engine: eng, Binary: bin, Sections: t.Config.EgressSections,
		ConfigFile: TrustedFile(t.Config), StateDir: state, LoginStore: filepath.Join(state, logins.StoreFile),
		Labels: t.Labels, Progress: t.Progress}, nil
}

// Release removes workspace ws's proxied network when nothing uses it any
// more (its receipts are kept). It needs no config, so that `vak session
// rm` releases what `vak session create` acquired.
func (t Topology) Release(ctx context.Context, ws string) {
	eng, state, err := engineAndState()
	if err != nil {
		return
	}
	if err := proxynet.Teardown(ctx, eng, state, ws, false); err != nil {
		t.warnf("removing the proxied network of %s: %v (`vak gc` tries again)", ws, err)
	}
}

// KeepWarm keeps workspace ws's proxied network up for idle after now,
// whether or not a sandbox uses it (session.run_network_idle).
func (t Topology) KeepWarm(ws string, idle time.Duration) {
	state, err := paths.EnsureStateDir()
	if err == nil {
		err = proxynet.KeepWarm(state, ws, time.Now().Add(idle))
	}
	if err != nil {
		t.warnf("proxied network of %s: %v", ws, err)
	}
}

// GC removes the caller's proxied networks that nothing uses and whose
// warm time has passed (what vak gc does for them). What is in use is left
// quietly (vak gc reports it); only a failure is worth a warning.
func (t Topology) GC(ctx context.Context) {
	eng, state, err := engineAndState()
	if err != nil {
		return
	}
	if _, err := proxynet.GC(ctx, eng, state, t.Labels); err != nil {
		t.warnf("removing idle proxied networks: %v (the run succeeded; `vak gc` tries again)", err)
	}
}

// engineAndState is the Engine API client and vak's state dir, which
// releasing and collecting topologies need (best effort: their callers
// have nothing to release without them).
func engineAndState() (*client.Client, string, error) {
	eng, err := engine.New()
	if err != nil {
		return nil, "", err
	}
	state, err := paths.EnsureStateDir()
	return eng, state, err
}

func (t Topology) warnf(format string, args ...any) {
	if t.Warn != nil {
		t.Warn(fmt.Sprintf(format, args...))
	}
}

// TrustedFile names the file the gateway sections come from (or would):
// the trusted user config.
func TrustedFile(cfg *config.Config) string {
	if cfg.EgressFile != "" {
		return cfg.EgressFile
	}
	for _, s := range cfg.Sources {
		if s.Trusted {
			return s.Path
		}
	}
	return "the user config"
}
