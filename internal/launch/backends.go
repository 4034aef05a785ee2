package launch

import (
	"vak/internal/config"
	"vak/internal/leanstage/entry"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/sandbox/landlock"
	"vak/internal/sandbox/none"
	"vak/internal/sandbox/seatbelt"
)

// Registry builds the backends this build provides, configured from cfg;
// labels go on every container the docker backend creates (the hidden
// --label flag: tests mark what they create with vak.test=1).
func Registry(cfg *config.Config, labels map[string]string) *sandbox.Registry {
	r := sandbox.NewRegistry()
	d := docker.New(cfg.Sandbox.Image)
	d.Labels = labels
	d.Runtime = cfg.Sandbox.Runtime
	d.User.Root = cfg.Sandbox.User == config.UserRoot
	d.Probe = &docker.Probe{}
	if dir, err := paths.EnsureStateDir(); err == nil {
		d.Probe.CacheDir = dir
	}
	r.Register(d)
	r.Register(none.Backend{})
	r.Register(&landlock.Backend{AllowWeaker: cfg.Sandbox.AllowWeaker})
	r.Register(seatbelt.New())
	return r
}

// HomeTargetProblem says why backend b cannot place a persistent agent
// home at home, the user's HOME (nil: it can): the landlock view cannot
// where HOME is one of the sandbox's own directories.
func HomeTargetProblem(b sandbox.Name, home string) error {
	if b == sandbox.Landlock {
		return landlock.CheckHomeTarget(home)
	}
	return nil
}

// RegisterWorkers registers the worker entry points of a re-executed worker
// (entry.RegisterWorkers, which the lean stage program registers too): the
// vak binary is also the worker when it embeds no lean stage program, and
// it always is for the docker backend's container. Calling it again does
// nothing.
func RegisterWorkers() { entry.RegisterWorkers() }
