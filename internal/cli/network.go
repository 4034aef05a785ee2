package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/config"
	"vak/internal/netfence"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/taskenv"
)

// proxyNet returns functions that bring up a workspace's proxied network
// (reusing a running one) and release it (it goes when its last user does).
// acquire's done lets go of the caller's hold on the network (its lease:
// nothing removes it before), to be called once the sandbox containers
// that use it exist, or are gone. labels are added to the topology's
// resources (tests: vak.test=1). nested asks for netfence nested mode
// (nested Docker).
func (a *app) proxyNet(cfg *config.Config, labels map[string]string) (acquire func(context.Context, string, bool) (att *sandbox.NetworkAttachment, done func(), err error), release func(context.Context, string)) {
	opts := func() (proxynet.Options, error) {
		eng, err := engine()
		if err != nil {
			return proxynet.Options{}, err
		}
		state, err := paths.EnsureStateDir()
		if err != nil {
			return proxynet.Options{}, err
		}
		bin := cfg.Session.Worker
		if bin == "" {
			bin = workerExecutable
		}
		if bin == "" {
			if bin, err = os.Executable(); err != nil {
				return proxynet.Options{}, err
			}
		}
		return proxynet.Options{Engine: eng, Binary: bin, Sections: cfg.EgressSections, ConfigFile: trustedFile(cfg), StateDir: state, Labels: labels, Progress: a.stdio.Err}, nil
	}
	acquire = func(ctx context.Context, ws string, nested bool) (*sandbox.NetworkAttachment, func(), error) {
		o, err := opts()
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
	return acquire, a.releaseProxyNet
}

// releaseProxyNet removes a workspace's proxied network when nothing uses
// it any more (its receipts are kept). It needs no config, so that
// `vak session rm` releases what `vak session create` acquired.
func (a *app) releaseProxyNet(ctx context.Context, ws string) {
	eng, err := taskenv.NewEngine()
	if err != nil {
		return
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return
	}
	if err := proxynet.Teardown(ctx, eng, state, ws, false); err != nil {
		a.warnf("removing the proxied network of %s: %v (`vak gc` tries again)", ws, err)
	}
}

// engine is the Engine API client (taskenv.NewEngine), or an error
// wrapping docker.ErrDaemonUnavailable when it cannot be made.
func engine() (*client.Client, error) {
	eng, err := taskenv.NewEngine()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", docker.ErrDaemonUnavailable, err)
	}
	return eng, nil
}

// trustedFile names the file the gateway sections come from (or would): the
// trusted user config.
func trustedFile(cfg *config.Config) string {
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

// keepProxyNetWarm keeps the workspace's proxied network up for idle after
// now, whether or not a sandbox uses it (session.run_network_idle).
func (a *app) keepProxyNetWarm(ws string, idle time.Duration) {
	state, err := paths.EnsureStateDir()
	if err == nil {
		err = proxynet.KeepWarm(state, ws, time.Now().Add(idle))
	}
	if err != nil {
		a.warnf("proxied network of %s: %v", ws, err)
	}
}

// gcProxyNets removes the caller's proxied networks that nothing uses and
// whose warm time has passed (what vak gc does for them). What is in use
// is left quietly (vak gc reports it); only a failure is worth a warning.
func (a *app) gcProxyNets(ctx context.Context) {
	eng, err := taskenv.NewEngine()
	if err != nil {
		return
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return
	}
	if _, err := proxynet.GC(ctx, eng, state, a.labels); err != nil {
		a.warnf("removing idle proxied networks: %v (the run succeeded; `vak gc` tries again)", err)
	}
}
