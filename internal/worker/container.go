package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Container mode: the worker is the entrypoint (PID 1) of a session
// container (internal/sandbox/docker). There is no fd 3 through docker, so
// the spec arrives in the SpecEnv variable; the worker serves the protocol on
// its attached stdio (the broker that created the session) and on a unix
// socket in a per-session directory the broker bind-mounts, so separate
// `vak session exec` processes reach it without a docker round trip.

// BackendContainer is the backend name of a container-mode worker.
const BackendContainer = "container"

// SpecEnv carries a container-mode worker's spec (JSON). The worker removes
// it from its own environment before serving anything; commands never see it.
const SpecEnv = "VAK_WORKER_SPEC"

// ReapCommand is the hidden vak subcommand a container-mode worker starts
// every command under (see Reap).
const ReapCommand = "__reap"

// ContainerSpec configures a container-mode worker.
type ContainerSpec struct {
	// Socket is the unix socket to listen on, inside the per-session
	// directory. The worker creates it 0600.
	Socket string `json:"socket"`
	// IdleTimeout ends the session after this long without a request;
	// zero means never.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// Deadline ends the session at this time (its maximum lifetime); zero
	// means never.
	Deadline time.Time `json:"deadline,omitempty"`
	// Mounts are the host paths the broker checked and bind-mounted. The
	// worker refuses to serve unless each one is, inside the container, the
	// very file or directory the broker checked (same device and inode, or
	// the same Attrs where the runtime shows numbers of its own): a path
	// swapped for a symlink between the check and the mount (the daemon
	// follows symlinks in mount sources) would show another inode.
	Mounts []MountIdentity `json:"mounts,omitempty"`
	// InheritEnv makes the worker's own environment (the image's, as the
	// orchestrator started it) the base of every command's, with the
	// spec's Env set over it: a Kubernetes pod's image is not inspected by
	// the host, so its ENV is only known inside.
	InheritEnv bool `json:"inherit_env,omitempty"`
}

// MountIdentity is a mounted path and the device and inode it had when the
// broker checked it.
type MountIdentity struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	// Type is the file type bits of its mode (S_IFMT: directory, regular
	// file). Device and inode alone do not identify a mount: a checked
	// file replaced by a symlink can get the freed inode number back, and
	// the daemon then mounts the link's target elsewhere while the link
	// itself, with the checked numbers, stays at the path.
	Type uint32 `json:"type"`
	// Attrs, when set, is compared instead of Dev and Ino: under gVisor
	// every bind mount shows a device and inode numbers of gVisor's own,
	// while the attributes below are the host's. The change time is the
	// part that identifies: the kernel sets it on every change and no
	// system call sets it to a chosen value, so another file (a symlink's
	// target outside the workspace) matches only if it was last changed in
	// the same clock tick as the checked one, and has the same type,
	// permissions, owner, size, link count and modification time.
	Attrs *FileAttrs `json:"attrs,omitempty"`
}

// FileAttrs are the attributes of a file (lstat) that a runtime whose
// file system numbers inodes itself passes through from the host.
type FileAttrs struct {
	Mode  uint32 `json:"mode"` // type and permission bits
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
	Size  int64  `json:"size"`
	Nlink uint64 `json:"nlink"`
	Mtime int64  `json:"mtime"` // nanoseconds since the epoch
	Ctime int64  `json:"ctime"`
}

// ErrMountReplaced reports a bind mount that is not what the broker checked.
var ErrMountReplaced = errors.New("worker: a mount is not the host path the broker checked")

// ErrContainerUnsupported reports that container mode runs only on Linux
// (session containers are Linux containers; other hosts bind-mount a Linux
// build of vak into them).
var ErrContainerUnsupported = errors.New("worker: container mode needs Linux")

// Why a container-mode worker ended on its own (RunContainer's result).
var (
	ErrIdle     = errors.New("session ended: idle timeout reached")
	ErrDeadline = errors.New("session ended: maximum lifetime reached")
)

// ReadSpecEnv reads a container-mode worker's spec from SpecEnv and removes
// the variable from the process environment.
func ReadSpecEnv() (*Spec, []byte, error) {
	data, ok := os.LookupEnv(SpecEnv)
	if !ok {
		return nil, nil, fmt.Errorf("worker: no spec in $%s", SpecEnv)
	}
	os.Unsetenv(SpecEnv)
	s, err := ParseSpec([]byte(data))
	if err != nil {
		return nil, nil, err
	}
	if s.Backend != BackendContainer || s.Container == nil || s.Container.Socket == "" {
		return nil, nil, fmt.Errorf("worker: $%s is not a container spec with a socket", SpecEnv)
	}
	return s, []byte(data), nil
}

// childRegistry records the commands os/exec is waiting for, so that a
// PID-1 worker reaping orphaned zombies never reaps one of them.
type childRegistry struct {
	mu   sync.Mutex
	pids map[int]bool
}

// start starts cmd; with a registry, under the lock the reaper holds.
func (r *childRegistry) start(cmd *exec.Cmd) error {
	if r == nil {
		return cmd.Start()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	r.pids[cmd.Process.Pid] = true
	return nil
}

// done forgets cmd once os/exec has waited for it.
func (r *childRegistry) done(cmd *exec.Cmd) {
	if r == nil || cmd.Process == nil {
		return
	}
	r.mu.Lock()
	delete(r.pids, cmd.Process.Pid)
	r.mu.Unlock()
}

// ServeContainer is a session container's entrypoint (`vak __worker
// --container`): the worker as PID 1, its spec read from SpecEnv, serving
// in and out until ctx ends or the session ends on its own (idle timeout,
// lifetime: said on stderr, not an error).
func ServeContainer(ctx context.Context, in io.Reader, out, stderr io.Writer) error {
	spec, _, err := ReadSpecEnv()
	if err != nil {
		return err
	}
	desc := fmt.Sprintf("container: vak worker as PID 1 of a session container (mode %s); commands run as its user under a subreaper shim", spec.Mode)
	err = RunContainer(ctx, spec, desc, in, out)
	if errors.Is(err, ErrIdle) || errors.Is(err, ErrDeadline) {
		fmt.Fprintf(stderr, "vak: %v\n", err)
		return nil
	}
	return err
}
