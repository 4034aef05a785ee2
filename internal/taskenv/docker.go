package taskenv

// Nested Docker for sessions (Spec.Docker, docs/nested-docker.md): a
// dockerd sidecar in the netclient's namespace (netfence nested mode), with
// vak's Docker API guard in front of its raw socket; the guard's socket is
// shared with the session container through a volume of its own and named
// by DOCKER_HOST in the commands' environment.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/dockerd"
	"vak/internal/dockerguard"
	"vak/internal/errclass"
	"vak/internal/paths"
)

// Paths of nested Docker, the same in the session container and the
// sidecar (so a bind of DOCKER_HOST's path, as Testcontainers' Ryuk does,
// is recognised by the guard and rewritten to the reaper socket).
const (
	// ContainerDockerDir holds the guard's sockets (a volume only the
	// session and its sidecar mount).
	ContainerDockerDir = ContainerVakDir + "/docker"
	// ContainerDockerSocket is the guarded Engine API socket.
	ContainerDockerSocket = ContainerDockerDir + "/docker.sock"
	// ContainerReaperSocket is the reaper-only socket (list/remove).
	ContainerReaperSocket = ContainerDockerDir + "/reaper.sock"
	// sidecarVak is where the worker binary (the static vak) is mounted in
	// the sidecar to run `vak dockerguard`.
	sidecarVak = "/opt/vak/vak"
	// LabelDocker marks a session with nested Docker (value: "true").
	LabelDocker = "vak.docker"
	// SidecarPrefix names a session's sidecar: SidecarPrefix + session ID.
	SidecarPrefix = "vak-dockerd-"
	// DefaultSidecarTimeout bounds how long the nested engine and its guard
	// may take to answer.
	DefaultSidecarTimeout = 90 * time.Second
)

// ErrDockerUnavailable reports a session's nested Docker engine that cannot
// be started or is gone.
var ErrDockerUnavailable = errclass.New(errclass.Unavailable, "nested Docker unavailable")

// sidecarNames are the sidecar container and its two volumes (dockerd's
// state; the guard's sockets) of session id.
func sidecarNames(id string) (name, dataVol, sockVol string) {
	name = SidecarPrefix + id
	return name, name + "-lib", name + "-sock"
}

// dockerSidecar is the sidecar for plan p.
func (m *Manager) dockerSidecar(p *plan) (dockerd.Sidecar, error) {
	att := p.net
	if att == nil || !att.NestedPool.IsValid() || !att.Gateway.IsValid() || att.TrustCA == "" || len(att.Binds) == 0 {
		return dockerd.Sidecar{}, fmt.Errorf("%w: the proxied network is not in nested mode", ErrDockerUnavailable)
	}
	name, dataVol, sockVol := sidecarNames(p.id)
	labels := m.sidecarLabels(p.id)
	trustDir := path.Dir(att.TrustCA)
	policy := dockerguard.Policy{
		Workspace: p.spec.Workspace, TrustDir: trustDir, TrustEnv: att.TrustEnv,
		Pool: att.NestedPool, DNS: att.Gateway,
		Labels:      map[string]string{LabelSession: p.id},
		GuardSocket: ContainerDockerSocket, ReaperSocket: ContainerReaperSocket,
	}
	// The workspace as the session sees it: the workspace bind and its
	// protected paths read-only (inner binds resolve in the sidecar, so an
	// inner container gets no more of the workspace than the session).
	var mounts []mount.Mount
	for _, mp := range p.mounts {
		if paths.Within(p.spec.Workspace, mp.Target) {
			mounts = append(mounts, mp)
		}
	}
	mounts = append(mounts,
		mount.Mount{Type: mount.TypeBind, Source: p.worker, Target: sidecarVak, ReadOnly: true},
		mount.Mount{Type: mount.TypeVolume, Source: sockVol, Target: ContainerDockerDir},
	)
	for _, b := range att.Binds {
		src, dst, _ := strings.Cut(strings.TrimSuffix(b, ":ro"), ":")
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: true})
	}
	return dockerd.Sidecar{
		Name: name, Image: m.DockerImage, NetworkMode: att.Mode,
		Daemon:      dockerd.Daemon{Pool: att.NestedPool, Gateway: att.Gateway},
		TrustCA:     att.TrustCA,
		DataVolume:  dataVol,
		Mounts:      mounts,
		Labels:      labels,
		Guard:       append([]string{sidecarVak}, dockerguard.Args(policy, dockerd.RawSocket)...),
		GuardSocket: ContainerDockerSocket,
	}, nil
}

func (m *Manager) sidecarLabels(id string) map[string]string {
	l := map[string]string{LabelDocker: "true", LabelSession: id}
	for k, v := range m.Labels {
		l[k] = v
	}
	return l
}

// startSidecar starts the nested engine of p and waits until it answers
// through the guard.
func (m *Manager) startSidecar(ctx context.Context, cli *client.Client, p *plan) error {
	if m.DockerImage == "" {
		return fmt.Errorf("%w: no sidecar image configured", ErrDockerUnavailable)
	}
	s, err := m.dockerSidecar(p)
	if err != nil {
		return err
	}
	_, _, sockVol := sidecarNames(p.id)
	if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: sockVol, Labels: s.Labels}); err != nil {
		return fmt.Errorf("%w: create volume %s: %w", ErrDockerUnavailable, sockVol, err)
	}
	timeout := m.SidecarTimeout
	if timeout == 0 {
		timeout = DefaultSidecarTimeout
	}
	if _, err := dockerd.Start(ctx, cli, s, timeout); err != nil {
		m.removeSidecar(p.id)
		if cerrdefs.IsConflict(err) {
			return fmt.Errorf("%w: %w (a sidecar for session %s exists: vak session rm %s)", ErrSessionExists, err, p.id, p.id)
		}
		return fmt.Errorf("%w: %w", ErrDockerUnavailable, err)
	}
	return nil
}

// removeSidecar removes session id's sidecar and its volumes; missing ones
// are fine.
func (m *Manager) removeSidecar(id string) error {
	cli, err := m.engine()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name, dataVol, sockVol := sidecarNames(id)
	err = dockerd.Remove(ctx, cli, name, dataVol)
	if _, e := cli.VolumeRemove(ctx, sockVol, client.VolumeRemoveOptions{Force: true}); e != nil && !cerrdefs.IsNotFound(e) {
		err = errors.Join(err, fmt.Errorf("remove volume %s: %w", sockVol, e))
	}
	return err
}

// checkSidecar reports a --docker session whose nested engine is not
// running.
func (m *Manager) checkSidecar(ctx context.Context, rec *record) error {
	if !rec.Docker {
		return nil
	}
	cli, err := m.engine()
	if err != nil {
		return err
	}
	name, _, _ := sidecarNames(rec.ID)
	ins, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: session %s: its Docker engine (container %s) is gone; remove the session (vak session rm %s) and create it again", ErrDockerUnavailable, rec.ID, name, rec.ID)
		}
		return apiErr("inspect the Docker sidecar", err)
	}
	if st := ins.Container.State; st == nil || !st.Running {
		code := -1
		if st != nil {
			code = st.ExitCode
		}
		return fmt.Errorf("%w: session %s: its Docker engine (container %s) is not running (exit %d); remove the session (vak session rm %s) and create it again", ErrDockerUnavailable, rec.ID, name, code, rec.ID)
	}
	return nil
}
