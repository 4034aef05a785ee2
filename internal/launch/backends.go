package launch

import (
	"context"
	"log"
	"net"
	"sync"

	"vak/internal/config"
	"vak/internal/netfence"
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

var registerWorkers sync.Once

// RegisterWorkers registers the worker entry points that need this
// program's parts (sandbox.RegisterWorker): landlock's stages, whose stage 1
// serves a proxied network with netfence's native fence. The program that
// is re-executed as the worker (vak's command line) calls it before it
// runs; calling it again does nothing.
func RegisterWorkers() {
	registerWorkers.Do(func() {
		sandbox.RegisterWorker(string(sandbox.Landlock), landlock.WorkerEntry(fenceServer))
	})
}

// fenceServer is landlock's FenceServer: netfence's native fence.
func fenceServer(dialData, dialDNS func(context.Context) (net.Conn, error), errLog *log.Logger) (func(), error) {
	l, err := netfence.ServeLocal(netfence.LocalConfig{}, dialData, dialDNS, errLog)
	if err != nil {
		return nil, err
	}
	return l.Close, nil
}
