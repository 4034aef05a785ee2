package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// The [session] section configures session-scoped task environments
// (`vak session`, docs/sessions.md). It is privileged: a project config
// cannot set any of it (projectKeys does not list it, so it is stripped with
// a warning), because pool sizes, lifetimes, root package installs and the
// worker binary are the operator's decisions.
//
//	[session]
//	idle_timeout = "30m"       # a session unused this long ends
//	max_lifetime = "24h"       # no session lives longer
//	pool_size = 0              # warm containers kept per pool key (0: no pool)
//	allow_install = false      # root package installs (vak session exec --root)
//	worker = "/opt/vak/linux-amd64/vak"  # static Linux vak for the containers
//	policy_generation = "1"    # bump to invalidate every snapshot
//	run_network_idle = "10m"   # vak run's proxied network stays up this long after the last run ("0": removed after each run)
//	docker = false             # nested Docker in every session (as --docker)
//	docker_placeholders = []   # secret placeholders set in inner containers (none by default)
//	docker_runtime = "auto"    # nested Docker's sidecar: "auto" (the capability-listed runc sidecar), "sysbox" (required), "runc"
//	backend = "docker"         # where sessions run: "docker" or "kubernetes" ([kubernetes], kubernetes.go)

// Limits of the [session] values.
const (
	MinSessionTimeout  = time.Second
	MaxSessionLifetime = 30 * 24 * time.Hour
	MaxPoolSize        = 16
)

// Session is the validated [session] section.
type Session struct {
	IdleTimeout  time.Duration
	MaxLifetime  time.Duration
	PoolSize     int
	AllowInstall bool
	// Worker is the static Linux vak binary mounted into session containers;
	// empty means the running vak (which must then be static).
	Worker string
	// PolicyGeneration is hashed into snapshot keys.
	PolicyGeneration string
	// RunNetworkIdle is how long the proxied network of `vak run --network
	// proxied` is kept after the last run of its workspace (a warm
	// topology); zero removes it after each run.
	RunNetworkIdle time.Duration
	// Docker gives sessions a nested Docker engine (as `vak session create
	// --docker`; docs/nested-docker.md).
	Docker bool
	// DockerPlaceholders names the secret placeholders ([secrets] names)
	// the nested Docker guard sets in every inner container; empty (the
	// default) gives inner containers none.
	DockerPlaceholders []string
	// DockerRuntime chooses the nested Docker sidecar's baseline
	// (dockerd.ChooseBaseline): "auto" (the default: the capability-listed
	// runc sidecar, also where the Engine lists sysbox-runc, which is
	// untested with the netclient's shared network namespace), "sysbox"
	// (required; an error without it) or "runc" (never Sysbox).
	DockerRuntime string
	// Backend is where sessions run: "docker" (the default) or
	// "kubernetes" ([kubernetes], docs/kubernetes.md); `vak session create
	// --backend` overrides it.
	Backend string
}

// DockerRuntimes are the valid session.docker_runtime values (the same as
// dockerd.RuntimeChoices; config does not import dockerd).
var DockerRuntimes = []string{"auto", "sysbox", "runc"}

// Defaults of [session]: the session manager's own defaults
// (taskenv.DefaultIdleTimeout, ...), as literals because config must not
// import the docker package (it imports the worker; TestDefaultsMatchBackends
// keeps them equal).
const (
	DefaultSessionIdleTimeout      = 30 * time.Minute
	DefaultSessionMaxLifetime      = 24 * time.Hour
	DefaultSessionPolicyGeneration = "1"
	DefaultRunNetworkIdle          = 10 * time.Minute
)

// DefaultSession returns the built-in [session] values.
func DefaultSession() Session {
	return Session{
		IdleTimeout:      DefaultSessionIdleTimeout,
		MaxLifetime:      DefaultSessionMaxLifetime,
		PolicyGeneration: DefaultSessionPolicyGeneration,
		RunNetworkIdle:   DefaultRunNetworkIdle,
		DockerRuntime:    "auto",
		Backend:          "docker",
	}
}

var envNameRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

var generationRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`) })

// applySession validates and applies [session]. Only trusted files reach
// here with it set (strip removes it from project configs).
func (c *Config) applySession(file string, s *sessionWire) error {
	if s == nil {
		return nil
	}
	errf := func(key, format string, a ...any) error {
		return &Error{File: file, Key: "session." + key, Msg: fmt.Sprintf(format, a...)}
	}
	duration := func(key, v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d < MinSessionTimeout || d > MaxSessionLifetime {
			return 0, errf(key, "invalid duration %q (between %v and %v, e.g. \"30m\", \"24h\")", v, MinSessionTimeout, MaxSessionLifetime)
		}
		return d, nil
	}
	next := c.Session
	if s.IdleTimeout != nil {
		d, err := duration("idle_timeout", *s.IdleTimeout)
		if err != nil {
			return err
		}
		next.IdleTimeout = d
	}
	if s.MaxLifetime != nil {
		d, err := duration("max_lifetime", *s.MaxLifetime)
		if err != nil {
			return err
		}
		next.MaxLifetime = d
	}
	if next.IdleTimeout > next.MaxLifetime {
		return errf("idle_timeout", "%v is longer than session.max_lifetime (%v)", next.IdleTimeout, next.MaxLifetime)
	}
	if s.PoolSize != nil {
		if *s.PoolSize < 0 || *s.PoolSize > MaxPoolSize {
			return errf("pool_size", "must be between 0 and %d, got %d", MaxPoolSize, *s.PoolSize)
		}
		next.PoolSize = int(*s.PoolSize)
	}
	if s.AllowInstall != nil {
		next.AllowInstall = *s.AllowInstall
	}
	if s.Docker != nil {
		next.Docker = *s.Docker
	}
	if s.DockerPlaceholders != nil {
		seen := map[string]bool{}
		var names []string
		for _, n := range *s.DockerPlaceholders {
			if !envNameRe().MatchString(n) {
				return errf("docker_placeholders", "%q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", n)
			}
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
		next.DockerPlaceholders = names
	}
	if s.DockerRuntime != nil {
		if !slices.Contains(DockerRuntimes, *s.DockerRuntime) {
			return errf("docker_runtime", "%q is not one of %s", *s.DockerRuntime, strings.Join(DockerRuntimes, ", "))
		}
		next.DockerRuntime = *s.DockerRuntime
	}
	if s.Backend != nil {
		if !slices.Contains(SessionBackends, *s.Backend) {
			return errf("backend", "%q is not one of %s", *s.Backend, strings.Join(SessionBackends, ", "))
		}
		next.Backend = *s.Backend
	}
	if s.Worker != nil {
		p, err := hostPath(*s.Worker)
		if err != nil {
			return errf("worker", "%v", err)
		}
		next.Worker = p
	}
	if s.PolicyGeneration != nil {
		if !generationRe().MatchString(*s.PolicyGeneration) {
			return errf("policy_generation", "%q must be 1 to 64 of [A-Za-z0-9._-]", *s.PolicyGeneration)
		}
		next.PolicyGeneration = *s.PolicyGeneration
	}
	if s.RunNetworkIdle != nil {
		d, err := time.ParseDuration(*s.RunNetworkIdle)
		if err != nil || d < 0 || d > MaxSessionLifetime {
			return errf("run_network_idle", "invalid duration %q (0 to %v, e.g. \"10m\"; 0 removes the network after each run)", *s.RunNetworkIdle, MaxSessionLifetime)
		}
		next.RunNetworkIdle = d
	}
	c.Session = next
	return nil
}
