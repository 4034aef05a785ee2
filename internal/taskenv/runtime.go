package taskenv

// Sessions under another OCI runtime than runc: which runtimes can host a
// session, and what they need.

import (
	"context"
	"fmt"
	"strings"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
)

// ErrRuntime reports a Manager.Runtime that cannot host a session as vak
// runs one: the Engine does not list it, it is neither runc nor gVisor, or
// gVisor is registered without the flags sessions need. Nothing is
// created; the error names the runtime and what to change.
var ErrRuntime = errclass.New(errclass.Config, "the session runtime cannot host sessions")

// ErrSnapshotRuntime reports a snapshot of a session whose runtime keeps
// the container's file changes where `docker commit` does not see them
// (gVisor without --overlay2=none): the snapshot would silently miss them.
var ErrSnapshotRuntime = errclass.New(errclass.Config, "the session's runtime keeps its changes where a snapshot cannot see them")

// GVisorSessionArgs are the runsc flags a gVisor runtime needs in the
// daemon's registration ("runtimeArgs") to host sessions: the worker's
// socket (a unix socket created inside, connected to from the host) and
// snapshots (the root filesystem's changes written through to the layer
// `docker commit` reads).
var GVisorSessionArgs = []string{"--host-uds=create", "--overlay2=none"}

// sessionRuntime checks that the runtime sessions are configured to run
// under can host one (CheckRuntime, on the Engine's info), and returns it
// as the Engine lists it (the zero Runtime without one: the container then
// names engine.DefaultRuntime, whatever the daemon's default is). What
// runtime-specific checks decide is kept on the plan: gVisor's bind mounts
// are identified by attributes (worker.FileAttrs), not by device and inode.
func (m *Manager) sessionRuntime(ctx context.Context, cli *client.Client, spec Spec) (docker.Runtime, error) {
	if m.Runtime == "" {
		return docker.Runtime{}, nil
	}
	res, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return docker.Runtime{}, engine.APIError("docker info", err)
	}
	return CheckRuntime(res.Info, m.Runtime, spec.NetworkPolicy)
}

// CheckRuntime says whether the runtime name, as the Engine's info lists
// it, can host a session with the network policy: runc, or gVisor's runsc
// registered with --host-uds=create and a network of none. Otherwise it
// returns ErrRuntime naming the runtime and what to change.
func CheckRuntime(info system.Info, name string, network sandbox.NetworkPolicy) (docker.Runtime, error) {
	rt, ok := docker.RuntimeFrom(info, name)
	if !ok {
		return rt, fmt.Errorf("%w: sandbox.runtime %q: the Docker Engine lists no such runtime (it lists %s); register it in the daemon's configuration (\"runtimes\" in /etc/docker/daemon.json, then reload dockerd) or change sandbox.runtime", ErrRuntime, name, strings.Join(docker.RuntimeNames(info), ", "))
	}
	if rt.Runc() {
		return rt, nil
	}
	if !rt.GVisor() {
		return rt, fmt.Errorf("%w: sandbox.runtime %q (path %q, type %q) is neither runc nor gVisor's runsc: a session's worker must prove each bind mount is the path vak checked and serve a socket the host connects to, which vak knows how to do only under those two; use vak run --runtime %s instead", ErrRuntime, name, rt.Path, rt.Type, name)
	}
	if rt.Type != "" || !rt.HostUDS() {
		return rt, fmt.Errorf("%w: sandbox.runtime %q is gVisor registered without --host-uds=create: a session's worker listens on a unix socket the host connects to, which gVisor hides from the host otherwise; register it as {\"path\": \"/path/to/runsc\", \"runtimeArgs\": [%q, %q]} under \"runtimes\" in /etc/docker/daemon.json and reload dockerd", ErrRuntime, name, GVisorSessionArgs[0], GVisorSessionArgs[1])
	}
	if network == sandbox.NetworkProxied {
		return rt, fmt.Errorf("%w: sandbox.runtime %q with --network proxied: %w: a proxied session's fence is nftables rules in the namespace the container joins, which gVisor's own network stack does not send through; use --network none with this runtime", ErrRuntime, name, docker.ErrRuntimeNetwork)
	}
	return rt, nil
}

// SnapshotsUnder is nil when a session under rt can be snapshotted, else
// ErrSnapshotRuntime saying why and what to change.
func SnapshotsUnder(rt docker.Runtime) error {
	if rt.GVisor() && !rt.OverlayNone() {
		return fmt.Errorf("%w: gVisor (runtime %q) without --overlay2=none keeps a session's changes in its own overlay, which a commit does not see; add %q to the runtime's runtimeArgs in /etc/docker/daemon.json, reload dockerd and create the session again", ErrSnapshotRuntime, rt.Name, GVisorSessionArgs[1])
	}
	return nil
}

// snapshotRuntime refuses a snapshot of a container running under a
// runtime that keeps its changes out of `docker commit`'s sight. name is
// the container's HostConfig.Runtime; empty (a container that named none,
// on an Engine that does not record its default there) is the Engine's
// default runtime.
func snapshotRuntime(ctx context.Context, cli *client.Client, id, name string) error {
	if name == engine.DefaultRuntime {
		return nil
	}
	res, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return engine.APIError("docker info", err)
	}
	if name == "" {
		if name = res.Info.DefaultRuntime; name == engine.DefaultRuntime {
			return nil
		}
	}
	rt, ok := docker.RuntimeFrom(res.Info, name)
	if !ok {
		return fmt.Errorf("%w: session %s runs under runtime %q, which the Docker Engine no longer lists", ErrSnapshotRuntime, id, name)
	}
	if err := SnapshotsUnder(rt); err != nil {
		return fmt.Errorf("session %s: %w", id, err)
	}
	return nil
}
