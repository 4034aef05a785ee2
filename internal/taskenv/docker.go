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
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/dockerd"
	"vak/internal/dockerguard"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/paths"
	"vak/internal/sandbox"
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
	// LabelDockerSlot, on a session or pool container with nested Docker,
	// is the docker slot key of its sidecar (DockerSlot). Containers made
	// before it existed carry none: their slot is the session ID.
	LabelDockerSlot = "vak.docker.slot"
	// LabelDockerBaseline on a sidecar names its dockerd.Baseline.
	LabelDockerBaseline = "vak.docker.baseline"
	// SidecarPrefix names a sidecar: SidecarPrefix + docker slot key.
	SidecarPrefix = "vak-dockerd-"
	// PoolSlotPrefix starts the docker slot key of a sidecar made for the
	// warm pool (PoolSlotPrefix + 16 hex digits).
	PoolSlotPrefix = "pool-"
	// StageDir is where the guard stages workspace bind sources (on the
	// sidecar's private tmpfs next to the raw socket).
	StageDir = dockerd.RawSocketDir + "/binds"
	// DefaultSidecarTimeout bounds how long the nested engine and its guard
	// may take to answer.
	DefaultSidecarTimeout = 90 * time.Second
)

// ErrDockerUnavailable reports a session's nested Docker engine that cannot
// be started or is gone.
var ErrDockerUnavailable = errclass.New(errclass.Unavailable, "nested Docker unavailable")

// A docker slot key names a nested engine: its sidecar container
// (SidecarPrefix + key), its data and socket volumes (that name + "-lib",
// "-sock") and the owner label (vak.session=key) the guard puts on every
// inner container, network and volume and that the sidecar carries. None
// of these can change once the sidecar runs, so the session record carries
// the key (record.DockerSlot) instead of deriving it from the session ID.
// A cold --docker session's key is its session ID; a warm-pool pair's is
// PoolSlotPrefix + 16 hex digits, which no session ID has (IDs end in 10).

var poolSlotRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^` + PoolSlotPrefix + `[0-9a-f]{16}$`) })

// ValidDockerSlot reports whether key has the shape of a docker slot key
// (a session ID or a pool slot): vak removes containers and volumes named
// by it, so nothing else is used.
func ValidDockerSlot(key string) bool { return ValidID(key) || poolSlotRe().MatchString(key) }

// dockerSlot is the docker slot key of the session of rec: the record's,
// or for a record written before the field existed, the session ID.
func (r *record) dockerSlot() (string, error) {
	key := r.DockerSlot
	if key == "" {
		key = r.ID
	}
	if !ValidDockerSlot(key) {
		return "", fmt.Errorf("%w: session %s: docker slot %q in its record is not a slot key", ErrDockerUnavailable, r.ID, key)
	}
	return key, nil
}

// sidecarNames are the sidecar container and its two volumes (dockerd's
// state; the guard's sockets) of docker slot key.
func sidecarNames(key string) (name, dataVol, sockVol string) {
	name = SidecarPrefix + key
	return name, name + "-lib", name + "-sock"
}

// dockerSidecar is the sidecar for plan p in docker slot key.
func (m *Manager) dockerSidecar(p *plan, key string) (dockerd.Sidecar, error) {
	att := p.net
	if att == nil || !att.NestedPool.IsValid() || !att.Gateway.IsValid() || att.TrustCA == "" || len(att.Binds) == 0 {
		return dockerd.Sidecar{}, fmt.Errorf("%w: the proxied network is not in nested mode", ErrDockerUnavailable)
	}
	name, dataVol, sockVol := sidecarNames(key)
	labels := m.sidecarLabels(key)
	trustDir := path.Dir(att.TrustCA)
	env, err := propagated(att, p.spec.DockerPlaceholders)
	if err != nil {
		return dockerd.Sidecar{}, err
	}
	policy := dockerguard.Policy{
		Workspace: p.spec.Workspace, TrustDir: trustDir, TrustEnv: att.TrustEnv,
		Pool: att.NestedPool, DNS: att.Gateway,
		Labels:      map[string]string{LabelSession: key},
		GuardSocket: ContainerDockerSocket, ReaperSocket: ContainerReaperSocket,
		Env:      env,
		StageDir: StageDir,
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
		Baseline:    m.baseline(),
	}, nil
}

// baseline is the sidecars' baseline (DockerBaseline, defaulted).
func (m *Manager) baseline() dockerd.Baseline {
	if m.DockerBaseline == "" {
		return dockerd.BaselineCapabilities
	}
	return m.DockerBaseline
}

// propagated returns the NAME=placeholder entries of the network
// attachment for names (session.docker_placeholders), refusing a name that
// is not one of its placeholders.
func propagated(att *sandbox.NetworkAttachment, names []string) ([]string, error) {
	var out []string
	for _, name := range names {
		found := ""
		for _, kv := range att.Env {
			if k, _, _ := strings.Cut(kv, "="); k == name {
				found = kv
			}
		}
		for _, kv := range att.TrustEnv {
			if k, _, _ := strings.Cut(kv, "="); k == name {
				found = "" // a CA variable, not a placeholder
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%w: session.docker_placeholders: %q is not a secret placeholder of the proxied network (declare it in [secrets])", ErrInvalidSpec, name)
		}
		out = append(out, found)
	}
	return out, nil
}

func (m *Manager) sidecarLabels(key string) map[string]string {
	l := map[string]string{LabelDocker: "true", LabelSession: key, LabelOwner: strconv.Itoa(os.Getuid()), LabelDockerBaseline: string(m.baseline())}
	for k, v := range m.Labels {
		l[k] = v
	}
	return l
}

// startSidecar starts the nested engine of p in docker slot key and waits
// until it answers through the guard.
func (m *Manager) startSidecar(ctx context.Context, cli *client.Client, p *plan, key string) error {
	if m.DockerImage == "" {
		return fmt.Errorf("%w: no sidecar image configured", ErrDockerUnavailable)
	}
	s, err := m.dockerSidecar(p, key)
	if err != nil {
		return err
	}
	_, _, sockVol := sidecarNames(key)
	if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: sockVol, Labels: s.Labels}); err != nil {
		return fmt.Errorf("%w: create volume %s: %w", ErrDockerUnavailable, sockVol, err)
	}
	timeout := m.SidecarTimeout
	if timeout == 0 {
		timeout = DefaultSidecarTimeout
	}
	if _, err := dockerd.Start(ctx, cli, s, timeout); err != nil {
		m.removeSidecar(key)
		if cerrdefs.IsConflict(err) {
			return fmt.Errorf("%w: %w (a sidecar for session %s exists: vak session rm %s)", ErrSessionExists, err, p.id, p.id)
		}
		return fmt.Errorf("%w: %w", ErrDockerUnavailable, err)
	}
	return nil
}

// removeSidecar removes the sidecar of docker slot key and its volumes
// (the inner containers, images, networks and volumes, all labelled with
// the key, live in the data volume and go with it); missing ones are fine.
func (m *Manager) removeSidecar(key string) error {
	if !ValidDockerSlot(key) {
		return fmt.Errorf("%w: %q is not a docker slot key", ErrDockerUnavailable, key)
	}
	cli, err := m.engine()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name, dataVol, sockVol := sidecarNames(key)
	err = dockerd.Remove(ctx, cli, name, dataVol)
	if _, e := cli.VolumeRemove(ctx, sockVol, client.VolumeRemoveOptions{Force: true}); e != nil && !cerrdefs.IsNotFound(e) {
		err = errors.Join(err, fmt.Errorf("remove volume %s: %w", sockVol, e))
	}
	return err
}

// checkSidecar reports a --docker session whose nested engine is not
// running, or whose fence is gone: the netclient whose namespace the
// session and its sidecar share is not running (it exits when its rules
// change, e.g. an inner container with NET_ADMIN in that namespace flushed
// them), or it was started again after the session (a new namespace: the
// session's is not the one being fenced).
func (m *Manager) checkSidecar(ctx context.Context, rec *record) error {
	if !rec.Docker {
		return nil
	}
	key, err := rec.dockerSlot()
	if err != nil {
		return err
	}
	cli, err := m.engine()
	if err != nil {
		return err
	}
	name, _, _ := sidecarNames(key)
	ins, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: session %s: its Docker engine (container %s) is gone; remove the session (vak session rm %s) and create it again", ErrDockerUnavailable, rec.ID, name, rec.ID)
		}
		return engine.APIError("inspect the Docker sidecar", err)
	}
	if err := sidecarRunning(rec, name, ins.Container.State); err != nil {
		return err
	}
	return m.checkFence(ctx, cli, rec, ins.Container.HostConfig, ins.Container.State.StartedAt)
}

// sidecarRunning reports a sidecar (container name) that is not running.
func sidecarRunning(rec *record, name string, st *container.State) error {
	if st == nil || !st.Running {
		code := -1
		if st != nil {
			code = st.ExitCode
		}
		return fmt.Errorf("%w: session %s: its Docker engine (container %s) is not running (exit %d); remove the session (vak session rm %s) and create it again", ErrDockerUnavailable, rec.ID, name, code, rec.ID)
	}
	return nil
}

// checkFence checks that the netclient named by the sidecar's network mode
// runs and has not been restarted since the sidecar started.
func (m *Manager) checkFence(ctx context.Context, cli *client.Client, rec *record, hc *container.HostConfig, sidecarStarted string) error {
	if hc == nil {
		return fmt.Errorf("%w: session %s: its Docker engine has no network mode", ErrDockerUnavailable, rec.ID)
	}
	nc, ok := strings.CutPrefix(string(hc.NetworkMode), "container:")
	if !ok {
		return fmt.Errorf("%w: session %s: its Docker engine's network mode is %q, not the netclient's namespace", ErrDockerUnavailable, rec.ID, hc.NetworkMode)
	}
	ins, err := cli.ContainerInspect(ctx, nc, client.ContainerInspectOptions{})
	return fenceHolds(rec, nc, ins, err, sidecarStarted)
}

// fenceHolds checks the netclient nc (its inspect result ins, or the
// inspect's error) against the sidecar's start: it runs, is not paused,
// and was not started again after the sidecar.
func fenceHolds(rec *record, nc string, ins client.ContainerInspectResult, err error, sidecarStarted string) error {
	fail := func(why string) error {
		return fmt.Errorf("%w: session %s: the network fence of its Docker engine is gone: the netclient (container %s) %s; inner containers have no network; remove the session (vak session rm %s) and create it again", ErrDockerUnavailable, rec.ID, nc, why, rec.ID)
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fail("is gone")
		}
		return engine.APIError("inspect the netclient", err)
	}
	if n := strings.TrimPrefix(ins.Container.Name, "/"); n != "" {
		nc = n
	}
	st := ins.Container.State
	if st == nil || !st.Running {
		code := -1
		if st != nil {
			code = st.ExitCode
		}
		return fail(fmt.Sprintf("is not running (exit %d: it stops when its rules change)", code))
	}
	if st.Paused {
		return fail("is paused (its rules are not being re-verified)")
	}
	ncStart, err1 := time.Parse(time.RFC3339Nano, st.StartedAt)
	scStart, err2 := time.Parse(time.RFC3339Nano, sidecarStarted)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%w: session %s: cannot compare the start times of the netclient (%q) and the Docker engine (%q)", ErrDockerUnavailable, rec.ID, st.StartedAt, sidecarStarted)
	}
	if ncStart.After(scStart) {
		return fail("was started again after the session's engine (a new namespace)")
	}
	return nil
}
