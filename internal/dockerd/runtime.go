package dockerd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"vak/internal/engine"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"
)

// Baseline is how the sidecar is isolated from the host.
type Baseline string

const (
	// BaselineCapabilities is the default: Docker's default runtime (runc)
	// with CapDrop ALL plus exactly Capabilities, SeccompProfile and
	// apparmor=unconfined.
	BaselineCapabilities Baseline = "capabilities"
	// BaselineSysbox runs the sidecar with the Sysbox runtime
	// (SysboxRuntime): a user namespace of its own, procfs/sysfs
	// virtualised, a cgroup view of its own; no capabilities are added and
	// no seccomp profile or security option is set (Sysbox's documented
	// way to run Docker in a container). The private cgroup namespace is
	// still asked for and checked, and the memory and pids limits apply.
	BaselineSysbox Baseline = "sysbox"
)

// SysboxRuntime is the runtime name Sysbox registers with the Docker Engine
// (`docker info` lists it under Runtimes).
const SysboxRuntime = "sysbox-runc"

// Runtime choices (the trusted config's session.docker_runtime).
const (
	// RuntimeAuto, the default, picks BaselineCapabilities, also when the
	// Engine lists SysboxRuntime: the sidecar joins the netclient's network
	// namespace (a runc container), which Sysbox documents as unsupported
	// for a Sysbox container (nestybox/sysbox issue 518) and which has never
	// run against a real Sysbox here, so Sysbox is used only when asked for
	// (RuntimeSysbox).
	RuntimeAuto = "auto"
	// RuntimeSysbox requires Sysbox: ErrNoSysbox when the Engine does not
	// list SysboxRuntime (fail closed, nothing started).
	RuntimeSysbox = "sysbox"
	// RuntimeRunc is BaselineCapabilities, named explicitly.
	RuntimeRunc = "runc"
)

// SysboxIssue is the upstream issue about a Sysbox container joining
// another container's network namespace (why RuntimeAuto does not pick
// Sysbox).
const SysboxIssue = "nestybox/sysbox issue 518"

// RuntimeChoices are the valid runtime choices, in documentation order.
var RuntimeChoices = []string{RuntimeAuto, RuntimeSysbox, RuntimeRunc}

// ErrNoSysbox is returned by ChooseBaseline when Sysbox is required but the
// Engine does not list SysboxRuntime.
var ErrNoSysbox = errors.New("dockerd: the Docker Engine lists no " + SysboxRuntime + " runtime")

// ChooseBaseline picks the sidecar's baseline from the Engine's runtime list
// (system.Info.Runtimes, `docker info`) and choice (RuntimeChoices; empty
// means RuntimeAuto). It also returns why, for `vak session create
// --docker` and `vak doctor`.
//
//	choice      Engine lists sysbox-runc    Engine does not
//	auto, ""    capabilities (not used)     capabilities
//	sysbox      sysbox                      ErrNoSysbox
//	runc        capabilities (not used)     capabilities
func ChooseBaseline(runtimes map[string]system.RuntimeWithStatus, choice string) (Baseline, string, error) {
	_, sysbox := runtimes[SysboxRuntime]
	listed := runtimeNames(runtimes)
	switch choice {
	case "", RuntimeAuto:
		if sysbox {
			return BaselineCapabilities, "docker info lists " + SysboxRuntime + ", not used: \"auto\" takes Sysbox only when asked for (session.docker_runtime = \"sysbox\"), as the sidecar shares the runc netclient's network namespace, untested under Sysbox (" + SysboxIssue + ")", nil
		}
		return BaselineCapabilities, "docker info lists no " + SysboxRuntime + " (runtimes: " + listed + ")", nil
	case RuntimeSysbox:
		if !sysbox {
			return "", "", fmt.Errorf("%w (runtimes: %s); install and register Sysbox, or set session.docker_runtime to \"auto\" or \"runc\" for the capability-listed runc sidecar", ErrNoSysbox, listed)
		}
		return BaselineSysbox, "required by the configuration; docker info lists " + SysboxRuntime + " (untested here with the shared network namespace: " + SysboxIssue + ")", nil
	case RuntimeRunc:
		why := "forced by the configuration"
		if sysbox {
			why += " (docker info lists " + SysboxRuntime + ", not used)"
		}
		return BaselineCapabilities, why, nil
	}
	return "", "", fmt.Errorf("dockerd: runtime choice %q is not one of %s", choice, strings.Join(RuntimeChoices, ", "))
}

// Describe is a one-line description of b.
func (b Baseline) Describe() string {
	switch b {
	case BaselineSysbox:
		return "sysbox (runtime " + SysboxRuntime + ", no added capabilities, no custom seccomp profile)"
	case BaselineCapabilities, "":
		return fmt.Sprintf("capabilities (runc, %d capabilities, Docker's seccomp profile plus %d syscalls)", len(Capabilities), len(ExtraSyscalls))
	}
	return string(b)
}

func runtimeNames(runtimes map[string]system.RuntimeWithStatus) string {
	if len(runtimes) == 0 {
		return "none listed"
	}
	names := make([]string, 0, len(runtimes))
	for n := range runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Runtimes returns the container runtimes the daemon cli talks to lists
// (docker info), ChooseBaseline's input; an unreachable daemon is
// engine.Unreachable's error.
func Runtimes(ctx context.Context, cli *engine.Client) (map[string]system.RuntimeWithStatus, error) {
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, engine.Unreachable(cli.DaemonHost(), fmt.Errorf("docker info: %w", err))
	}
	return info.Info.Runtimes, nil
}
