package taskenv

// The container a plan becomes: its config and host config.

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"vak/internal/engine"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/worker"
)

// containerConfig builds the create request for p. session is the session
// ID ("" for a pool container), runDir its socket directory, pool the pool
// key (pool containers), slot the docker slot key of its sidecar (Docker
// sessions).
func (m *Manager) containerConfig(p *plan, session, runDir, pool, slot string, created time.Time) (*container.Config, *container.HostConfig, error) {
	wspec := worker.Spec{
		Backend:        worker.BackendContainer,
		Workspace:      p.spec.Workspace,
		Mode:           p.spec.Mode,
		Env:            p.env,
		Protected:      p.protected,
		DefaultTimeout: p.spec.DefaultTimeout,
		Container: &worker.ContainerSpec{
			Socket:      ContainerRunDir + "/" + socketName,
			IdleTimeout: m.idle(),
			Deadline:    created.Add(m.lifetime()),
			Mounts:      p.identity,
		},
	}
	specJSON, err := wspec.Encode()
	if err != nil {
		return nil, nil, err
	}
	labels := map[string]string{
		engine.LabelManaged:   "true",
		engine.LabelKind:      KindSession,
		LabelOwner:            strconv.Itoa(os.Getuid()),
		LabelSession:          session,
		LabelTask:             p.spec.Task,
		LabelCreated:          strconv.FormatInt(created.Unix(), 10),
		engine.LabelWorkspace: p.spec.Workspace,
		LabelImage:            p.imageID,
		LabelLifetime:         strconv.FormatInt(int64(m.lifetime()/time.Second), 10),
		LabelIdle:             strconv.FormatInt(int64(m.idle()/time.Second), 10),
		LabelPolicy:           p.policy,
	}
	if pool != "" {
		labels[LabelPool] = pool
		labels[LabelTask] = ""
	}
	if p.install {
		labels[LabelInstall] = "true"
	}
	if p.spec.Docker {
		if !ValidDockerSlot(slot) {
			return nil, nil, fmt.Errorf("%w: docker slot %q", ErrDockerUnavailable, slot)
		}
		labels[LabelDocker] = "true"
		labels[LabelDockerSlot] = slot
	}
	if p.spec.OwnerPID > 0 && pool == "" {
		tok, err := engine.OwnerToken(p.spec.OwnerPID)
		if err != nil {
			return nil, nil, err
		}
		labels[LabelOwnerProc] = tok
	}
	for k, v := range m.Labels {
		labels[k] = v
	}
	pids := int64(p.limits.Pids)
	noInit := false
	cfg := &container.Config{
		Image:        p.imageID,
		User:         p.user.Spec(),
		Env:          append(slices.Clone(p.imageEnv), worker.SpecEnv+"="+string(specJSON)),
		Entrypoint:   []string{ContainerWorker, "__worker", "--container"},
		WorkingDir:   p.spec.Workspace,
		OpenStdin:    true,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Labels:       labels,
		StopSignal:   "SIGTERM",
	}
	secOpt := []string{"no-new-privileges"}
	if prof, err := docker.SeccompProfile(); err == nil {
		secOpt = append(secOpt, "seccomp="+string(prof))
	} else if !errors.Is(err, ErrUnsupported) {
		return nil, nil, err
	}
	hc := &container.HostConfig{
		NetworkMode:    "none",
		CapDrop:        []string{"ALL"},
		SecurityOpt:    secOpt,
		ReadonlyRootfs: p.spec.Mode == sandbox.ReadOnly,
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,exec,size=" + strconv.FormatInt(p.limits.TmpfsSize, 10)},
		IpcMode:        container.IPCModePrivate,
		Init:           &noInit,
		Runtime:        p.runtime,
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		Resources: container.Resources{
			Memory:     p.limits.Memory,
			MemorySwap: p.limits.Memory,
			NanoCPUs:   int64(p.limits.CPUs * 1e9),
			PidsLimit:  &pids,
		},
	}
	if p.install {
		hc.CapAdd = InstallCapabilities
	}

	hc.Mounts = append(slices.Clone(p.mounts),
		mount.Mount{Type: mount.TypeBind, Source: p.worker, Target: ContainerWorker, ReadOnly: true},
		mount.Mount{Type: mount.TypeBind, Source: runDir, Target: ContainerRunDir},
	)
	if p.spec.Docker {
		// The guard's sockets only (the raw daemon socket is on a tmpfs
		// of the sidecar's own).
		_, _, sockVol := sidecarNames(slot)
		// Read-only: a command that may write the volume root (an exec
		// with --root) could otherwise replace reaper.sock with a link to
		// the raw socket, which dockerd would then bind into a
		// container (sockets connect fine on a read-only mount).
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: sockVol, Target: ContainerDockerDir, ReadOnly: true})
	}
	if p.net != nil {
		// Join the netclient's namespace: no capability is added, so
		// nothing inside can change the fence.
		hc.NetworkMode = container.NetworkMode(p.net.Mode)
		for _, b := range p.net.Binds {
			src, dst, _ := strings.Cut(strings.TrimSuffix(b, ":ro"), ":")
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: true})
		}
		cfg.Env = append(cfg.Env, p.net.Env...)
		for k, v := range p.net.Labels {
			cfg.Labels[k] = v
		}
	}
	return cfg, hc, nil
}

// InstallCapabilities are added to sessions whose config allows package
// installs: what apt, apk and dnf need as root (file ownership and
// dropping to their own users). Processes of the session's unprivileged
// user never hold them (no-new-privileges; a non-root exec has no
// capabilities).
var InstallCapabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID"}

// homeArchive is a tar of SessionHome owned by the session's user (the
// daemon keeps the archive's ownership when CopyUIDGID is off).
func homeArchive(u docker.User) []byte {
	uid, gid := u.IDs()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(SessionHome, "/") + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: time.Unix(0, 0), Uid: uid, Gid: gid})
	tw.Close()
	return b.Bytes()
}
