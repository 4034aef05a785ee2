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

// registry builds the backends this build provides, configured from cfg.
func registry(cfg *config.Config) *sandbox.Registry {
	r := sandbox.NewRegistry()
	d := docker.New(cfg.Sandbox.Image)
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
