package cli

import (
	"context"
	"fmt"
	"os"

	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/taskenv"
)

// proxyNet returns functions that bring up a workspace's proxied network
// (reusing a running one) and release it (it goes when its last user does).
func (a *app) proxyNet(cfg *config.Config) (acquire func(context.Context, string) (*sandbox.NetworkAttachment, error), release func(context.Context, string)) {
	opts := func() (proxynet.Options, error) {
		eng, err := taskenv.NewEngine()
		if err != nil {
			return proxynet.Options{}, fmt.Errorf("%w: %w", docker.ErrDaemonUnavailable, err)
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
		return proxynet.Options{Engine: eng, Binary: bin, Sections: cfg.EgressSections, ConfigFile: trustedFile(cfg), StateDir: state, Labels: a.labels, Progress: a.stdio.Err}, nil
	}
	acquire = func(ctx context.Context, ws string) (*sandbox.NetworkAttachment, error) {
		o, err := opts()
		if err != nil {
			return nil, err
		}
		o.Workspace = ws
		n, err := proxynet.Ensure(ctx, o)
		if err != nil {
			return nil, err
		}
		return n.Attachment(), nil
	}
	release = func(ctx context.Context, ws string) {
		o, err := opts()
		if err != nil {
			return
		}
		if err := proxynet.Teardown(ctx, o.Engine, o.StateDir, ws, false); err != nil {
			a.warnf("proxied network of %s: %v", ws, err)
		}
	}
	return acquire, release
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
