package cli

import (
	"crypto/rand"
	"encoding/hex"

	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/sandbox/none"
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
	r.Unavailable(sandbox.Landlock, sandbox.ErrNotYetAvailable)
	r.Unavailable(sandbox.Seatbelt, sandbox.ErrNotYetAvailable)
	return r
}

// newID returns a random identifier for a command run.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
