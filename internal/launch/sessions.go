package launch

import (
	"os"

	"vak/internal/config"
	"vak/internal/hostenv"
	"vak/internal/sandbox/docker"
	"vak/internal/taskenv"
)

// Sessions is the task-environment manager of req (sessions start their
// containers through taskenv, and attach a proxied network through the
// same Topology as a run): labels, this program as the workspace watcher,
// the topology's acquire and release, and, with a config, its [session]
// settings. req.Config may be nil (`vak session rm`, ls, gc: defaults
// only; a network is then only released). planted receives what a
// session's workspace watcher removed, per session; nil passes each line
// to req.Warn.
func Sessions(req Request, planted func(id string, lines []string)) *taskenv.Manager {
	if planted == nil {
		planted = func(id string, lines []string) {
			for _, l := range lines {
				warnf(req, "session %s: workspace watcher: %s", id, l)
			}
		}
	}
	m := &taskenv.Manager{Worker: req.Executable, Labels: req.Labels, Planted: planted}
	topo := TopologyFor(req)
	// Discarding a session releases its workspace's proxied network, with
	// or without a config (session rm has none).
	m.ReleaseProxyNet = topo.Release
	// Watchers run this vak (session.worker, below, is for containers).
	m.Watcher = req.Executable
	if m.Watcher == "" {
		m.Watcher, _ = os.Executable()
	}
	cfg := req.Config
	if cfg == nil {
		return m
	}
	m.ProxyNet = topo.Acquire
	s := cfg.Session
	m.IdleTimeout, m.MaxLifetime, m.PoolSize = s.IdleTimeout, s.MaxLifetime, s.PoolSize
	m.AllowInstall, m.PolicyGeneration = s.AllowInstall, s.PolicyGeneration
	m.Runtime = cfg.Sandbox.Runtime
	if s.Worker != "" {
		m.Worker = s.Worker
	}
	m.EnvAllowlist = hostenv.Allowlist(cfg.Sandbox.Env...)
	if cfg.Sandbox.User == config.UserRoot {
		m.User = docker.User{Root: true}
	}
	return m
}
