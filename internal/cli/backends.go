package cli

import (
	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/sandbox/landlock"
	"vak/internal/sandbox/none"
	"vak/internal/sandbox/seatbelt"
)

// registry builds the backends this build provides, configured from cfg;
// labels go on every container the docker backend creates (the hidden
// --label flag: tests mark what they create with vak.test=1).
func registry(cfg *config.Config, labels map[string]string) *sandbox.Registry {
	r := sandbox.NewRegistry()
	d := docker.New(cfg.Sandbox.Image)
	d.Labels = labels
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
