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
)

// Network policies.
const (
	NetworkNone    = "none"
	NetworkProxied = "proxied"
)

// effectiveNetwork is the network policy: the command-line flag (trusted),
// else the trusted config's [network] policy, else none. A project config
// can never set it (the loader strips [network]).
func effectiveNetwork(cfg *config.Config, flag string) (string, error) {
	switch flag {
	case NetworkNone, NetworkProxied:
		return flag, nil
	case "":
	default:
		return "", fmt.Errorf("--network %q: want %s or %s", flag, NetworkNone, NetworkProxied)
	}
	if cfg.Egress != nil && cfg.Egress.Mode == NetworkProxied {
		return NetworkProxied, nil
	}
	return NetworkNone, nil
}

// proxyNet returns functions that bring up a workspace's proxied network
// (reusing a running one) and release it (it goes when its last user does).
// labels are added to the topology's resources (tests: vak.test=1).
func (a *app) proxyNet(cfg *config.Config, labels map[string]string) (acquire func(context.Context, string) (*sandbox.NetworkAttachment, error), release func(context.Context, string)) {
	opts := func() (proxynet.Options, error) {
		eng, err := docker.NewEngine()
		if err != nil {
			return proxynet.Options{}, fmt.Errorf("%w: %v", docker.ErrDaemonUnavailable, err)
		}
		state, err := paths.EnsureStateDir()
		if err != nil {
			return proxynet.Options{}, err
		}
		userConfig := a.userConfig
		if userConfig == "" {
			if userConfig, err = paths.UserConfigFile(); err != nil {
				return proxynet.Options{}, err
			}
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
		return proxynet.Options{Engine: eng, Binary: bin, UserConfig: userConfig, StateDir: state, Labels: labels, Progress: a.stdio.Err}, nil
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
	return acquire, a.releaseProxyNet
}

// releaseProxyNet removes a workspace's proxied network when nothing uses
// it any more (its receipts are kept). It needs no config, so that
// `vak session rm` releases what `vak session create` acquired.
func (a *app) releaseProxyNet(ctx context.Context, ws string) {
	eng, err := docker.NewEngine()
	if err != nil {
		return
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return
	}
	if err := proxynet.Teardown(ctx, eng, state, ws, false); err != nil {
		a.warnf("proxied network of %s: %v", ws, err)
	}
}
