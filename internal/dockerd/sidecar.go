package dockerd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"vak/internal/engine"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// Sidecar describes one nested engine container.
type Sidecar struct {
	// Name of the container.
	Name string
	// Image is the sidecar image (EnsureImage's tag).
	Image string
	// NetworkMode is "container:<netclient>": the sidecar joins the
	// fenced namespace, so the daemon's own traffic (pulls, log drivers)
	// and every inner container's are captured.
	NetworkMode string
	// Daemon is the engine's configuration.
	Daemon Daemon
	// TrustCA is the path, inside the sidecar, of the vak CA certificate
	// (the trust dir must be among Mounts).
	TrustCA string
	// DataVolume is the named volume for dockerd's state (images survive a
	// sidecar restart; removed with the task environment).
	DataVolume string
	// Mounts are the workspace and the trust dir, at the same paths as in
	// the agent (bind sources of inner containers resolve in the sidecar).
	Mounts []mount.Mount
	// Labels go on the container and volume (owner, session).
	Labels map[string]string
	// Guard, if set, is the guard's command line (an absolute path inside
	// the sidecar, e.g. the bind-mounted vak binary, and dockerguard.Args),
	// started by the entrypoint; GuardSocket is the socket it serves, which
	// Start also waits for.
	Guard       []string
	GuardSocket string
	// Baseline is how the sidecar is isolated (ChooseBaseline; empty:
	// BaselineCapabilities).
	Baseline Baseline
	// Memory and PidsLimit bound the sidecar and so everything in it
	// (zero: DefaultMemory, DefaultPidsLimit).
	Memory    int64
	PidsLimit int64
}

// Spec is the container configuration for s: only the listed capabilities,
// the generated seccomp profile, a private cgroup namespace, the raw socket
// on a tmpfs of its own, the state on a named volume, resource limits. With
// BaselineSysbox: the Sysbox runtime instead of the capabilities, the
// seccomp profile and the security options (and no fresh cgroup2 mount);
// the rest is the same.
func (s Sidecar) Spec() (*container.Config, *container.HostConfig, error) {
	if s.Name == "" || s.Image == "" || s.DataVolume == "" {
		return nil, nil, fmt.Errorf("dockerd: sidecar needs a name, an image and a data volume")
	}
	if !strings.HasPrefix(s.NetworkMode, "container:") {
		return nil, nil, fmt.Errorf("dockerd: sidecar network mode %q must be container:<netclient> (the fenced namespace)", s.NetworkMode)
	}
	if len(s.Guard) > 0 && s.GuardSocket == "" {
		return nil, nil, fmt.Errorf("dockerd: a guard command needs its GuardSocket")
	}
	sysbox := false
	switch s.Baseline {
	case "", BaselineCapabilities:
	case BaselineSysbox:
		sysbox = true
	default:
		return nil, nil, fmt.Errorf("dockerd: unknown sidecar baseline %q", s.Baseline)
	}
	cmd, err := s.Daemon.entrypoint(s.TrustCA, !sysbox, s.Guard...)
	if err != nil {
		return nil, nil, err
	}
	mem, pids := s.Memory, s.PidsLimit
	if mem == 0 {
		mem = DefaultMemory
	}
	if pids == 0 {
		pids = DefaultPidsLimit
	}
	mounts := append([]mount.Mount{{Type: mount.TypeVolume, Source: s.DataVolume, Target: DataDir}}, s.Mounts...)
	for _, m := range s.Mounts {
		if m.Target == RawSocketDir || strings.HasPrefix(RawSocketDir, strings.TrimSuffix(m.Target, "/")+"/") {
			return nil, nil, fmt.Errorf("dockerd: mount at %s would cover the raw socket dir %s", m.Target, RawSocketDir)
		}
	}
	cfg := &container.Config{
		Image:      s.Image,
		Entrypoint: cmd[:1],
		Cmd:        cmd[1:],
		Labels:     s.Labels,
		User:       "0:0",
	}
	host := &container.HostConfig{
		NetworkMode:  container.NetworkMode(s.NetworkMode),
		CgroupnsMode: container.CgroupnsModePrivate,
		Mounts:       mounts,
		Tmpfs:        map[string]string{RawSocketDir: "rw,nosuid,nodev,noexec,mode=0700,size=1m"},
		Resources:    container.Resources{Memory: mem, PidsLimit: &pids},
	}
	if sysbox {
		// Sysbox's root is root only in the container's own user namespace
		// (and Sysbox ignores capability requests unless told otherwise):
		// no capabilities, seccomp profile or security options of ours.
		host.Runtime = SysboxRuntime
		return cfg, host, nil
	}
	prof, err := SeccompProfile()
	if err != nil {
		return nil, nil, err
	}
	// runc by name: the capability baseline must not end up under another
	// default runtime the Engine may be configured with.
	host.Runtime = engine.DefaultRuntime
	host.CapDrop = []string{"ALL"}
	host.CapAdd = append([]string(nil), Capabilities...)
	host.SecurityOpt = []string{"seccomp=" + string(prof), "apparmor=unconfined"}
	return cfg, host, nil
}

// Start creates and starts the sidecar, refuses (and removes it) unless its
// cgroup namespace is private, and waits until the raw daemon answers.
func Start(ctx context.Context, cli *client.Client, s Sidecar, timeout time.Duration) (string, error) {
	cfg, host, err := s.Spec()
	if err != nil {
		return "", err
	}
	if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: s.DataVolume, Labels: s.Labels}); err != nil {
		return "", fmt.Errorf("dockerd: create volume %s: %w", s.DataVolume, err)
	}
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: s.Name, Config: cfg, HostConfig: host})
	if err != nil {
		return "", fmt.Errorf("dockerd: create sidecar %s: %w", s.Name, err)
	}
	fail := func(err error) (string, error) {
		cli.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true})
		return "", err
	}
	// The engine may ignore the mode (API < 1.41): check what it recorded.
	ins, err := cli.ContainerInspect(ctx, res.ID, client.ContainerInspectOptions{})
	if err != nil {
		return fail(fmt.Errorf("dockerd: inspect sidecar %s: %w", s.Name, err))
	}
	var mode container.CgroupnsMode
	if ins.Container.HostConfig != nil {
		mode = ins.Container.HostConfig.CgroupnsMode
	}
	if mode != container.CgroupnsModePrivate {
		return fail(fmt.Errorf("%w: %s was created with cgroupns mode %q, need %q (Docker API 1.41 or later)", ErrCgroupnsNotPrivate, s.Name, mode, container.CgroupnsModePrivate))
	}
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return fail(fmt.Errorf("dockerd: start sidecar %s: %w", s.Name, err))
	}
	// With a guard, `docker info` through it is the one wait: the guard
	// forwards it to the raw socket, so an answer means both serve.
	if s.GuardSocket != "" {
		if err := WaitReady(ctx, cli, res.ID, timeout, s.GuardSocket); err != nil {
			return fail(fmt.Errorf("dockerd: the guard (in front of the raw socket): %w", err))
		}
		return res.ID, nil
	}
	if err := WaitReady(ctx, cli, res.ID, timeout, RawSocket); err != nil {
		return fail(err)
	}
	return res.ID, nil
}

// WaitReady polls until `docker info` answers on socket (RawSocket, or the
// guard's) inside the sidecar; a sidecar that exits is reported with its
// last log lines.
func WaitReady(ctx context.Context, cli *client.Client, id string, timeout time.Duration, socket string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// One exec waits inside the sidecar for up to about two seconds: for
	// the raw socket to appear (a file test, no CPU taken from dockerd's
	// start), then for one `docker info`, which dockerd answers once it
	// has initialised (it listens before that). Between rounds, a sidecar
	// that exited is noticed.
	info := "docker -H " + shq("unix://"+socket) + " info --format '{{.ServerVersion}}'"
	script := `i=0; while [ ! -S ` + RawSocket + ` ] && [ $i -lt 200 ]; do sleep 0.01; i=$((i+1)); done; ` + info
	var last string
	for {
		ins, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return fmt.Errorf("dockerd: inspect sidecar: %w", err)
		}
		if st := ins.Container.State; st == nil || !st.Running {
			return fmt.Errorf("dockerd: the sidecar %s is not running (exit %d): %s", strings.TrimPrefix(ins.Container.Name, "/"), exitCode(ins), logTail(ctx, cli, id))
		}
		var out strings.Builder
		err = engine.Exec(ctx, cli, id, &out, &out, "sh", "-c", script)
		if err == nil {
			return nil
		}
		if o := strings.TrimSpace(out.String()); o != "" {
			last = o
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dockerd: the nested daemon did not answer on %s within %v: %s: %s", socket, timeout, last, logTail(context.WithoutCancel(ctx), cli, id))
		case <-time.After(50 * time.Millisecond): // an exec that failed at once
		}
	}
}

func exitCode(ins client.ContainerInspectResult) int {
	if ins.Container.State == nil {
		return -1
	}
	return ins.Container.State.ExitCode
}

func logTail(ctx context.Context, cli *client.Client, id string) string {
	rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "5"})
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer rc.Close()
	var b strings.Builder
	stdcopy.StdCopy(&b, &b, rc)
	return strings.TrimSpace(b.String())
}

// Remove removes the sidecar container and its data volume; missing ones
// are fine.
func Remove(ctx context.Context, cli *client.Client, name, volume string) error {
	if _, err := cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("dockerd: remove sidecar %s: %w", name, err)
	}
	if volume != "" {
		if _, err := cli.VolumeRemove(ctx, volume, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("dockerd: remove volume %s: %w", volume, err)
		}
	}
	return nil
}
