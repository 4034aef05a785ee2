package docker

import (
	"context"

	"vak/internal/hostenv"
	"vak/internal/sandbox"
)

// ClientEnv are the variables the docker CLI itself needs in the host
// worker of the docker backend (never passed into containers).
var ClientEnv = []string{"PATH", "HOME", "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY"}

// WorkerDescription is what a docker backend's host worker reports in its
// ready event.
const WorkerDescription = "docker: host-side worker; each bash command runs in its own container"

func init() {
	// The host worker restricts nothing itself: every bash command it
	// receives is already a wrapped `docker run`.
	sandbox.RegisterWorker(string(sandbox.Docker), sandbox.DescribeWorker(WorkerDescription))
}

var (
	_ sandbox.Describer       = (*Backend)(nil)
	_ sandbox.LimitsDescriber = (*Backend)(nil)
)

// HostEnv implements sandbox.Wrapper: the docker CLI's variables of the host.
func (b *Backend) HostEnv() []string {
	return hostenv.Lookup(ClientEnv)
}

// WrapperFailed implements sandbox.Wrapper: exit code 125 is docker run's
// own failure; if the daemon went away, the command fails closed with
// engine.ErrDaemonUnavailable instead of looking like the command's result.
func (b *Backend) WrapperFailed(ctx context.Context, exitCode int) error {
	if exitCode != 125 {
		return nil
	}
	b.Invalidate()
	return b.Available(ctx)
}

// Describe implements sandbox.Describer: the server version once probed,
// the runtime its containers run under when one is configured, and how
// vak run's commands reach it (Runner: the Engine API, or the docker CLI
// and why).
func (b *Backend) Describe(context.Context) string {
	if b.Probe == nil {
		return ""
	}
	how := "vak run creates its containers through the Engine API"
	if why := b.CLIReason(); why != "" {
		how = "vak run starts the docker CLI (" + why + ")"
	}
	rt := ""
	if b.Runtime != "" {
		rt = ", runtime " + b.Runtime + " (sandbox.runtime)"
	}
	return "(server " + b.Probe.Version() + rt + "), " + how
}

// DescribeLimits implements sandbox.LimitsDescriber: every limit is the
// container's (Wrap's docker run flags).
func (b *Backend) DescribeLimits(l sandbox.Limits) []string {
	return sandbox.LimitLines(l,
		"in total (the container's cgroup: docker run --memory)",
		"in total (the container's cgroup: docker run --pids-limit)",
		"(the container's CPU quota: docker run --cpus)",
		"(the container's /tmp is a tmpfs of that size: docker run --tmpfs)")
}
