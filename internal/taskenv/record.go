package taskenv

// Session records: what the broker keeps on the host about each session
// (and rebuilds from the daemon's labels when it is missing).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/worker"
)

// record is what the host keeps about a session so that a later process
// reaches its worker without asking the daemon.
type record struct {
	ID        string    `json:"id"`
	Container string    `json:"container"`
	Name      string    `json:"name"`
	RunDir    string    `json:"run_dir"`
	Workspace string    `json:"workspace"`
	Image     string    `json:"image"`
	User      string    `json:"user"`
	AgentHome string    `json:"home"`
	Env       []string  `json:"env"`
	Owner     string    `json:"owner,omitempty"`
	Install   bool      `json:"install,omitempty"`
	Created   time.Time `json:"created"`
	Pool      string    `json:"pool,omitempty"`
	// Docker: the session has a nested Docker engine.
	Docker bool `json:"docker,omitempty"`
	// DockerSlot is the docker slot key naming that engine's sidecar, its
	// volumes and its owner label (the session ID for a cold create, a pool
	// slot for a claimed pair); empty in records written before it
	// existed, which means the session ID (dockerSlot).
	DockerSlot string `json:"docker_slot,omitempty"`
	// DockerBaseline is the sidecar's baseline (dockerd.Baseline:
	// "capabilities" or "sysbox"), also its LabelDockerBaseline.
	DockerBaseline string `json:"docker_baseline,omitempty"`
	// Watched: the session has a workspace watcher (watcher.go), which
	// every call that runs a command checks is running.
	Watched bool `json:"watched,omitempty"`
}

func (m *Manager) recordPath(id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("%w: %q is not a session ID", ErrNoSession, id)
	}
	d, err := m.stateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, id+".json"), nil
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp" + randomHex(4)
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func (m *Manager) readRecord(id string) (*record, error) {
	p, err := m.recordPath(id)
	if err != nil {
		return nil, err
	}
	var r record
	if err := readJSON(p, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// recordFromDaemon rebuilds a lost record from the container itself.
func (m *Manager) recordFromDaemon(ctx context.Context, id string) (*record, error) {
	cli, err := m.engine()
	if err != nil {
		return nil, err
	}
	res, err := cli.ContainerInspect(ctx, SessionPrefix+id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrNoSession, id)
		}
		return nil, engine.APIError("inspect session "+id, err)
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[engine.LabelManaged] != "true" || c.Config.Labels[engine.LabelKind] != KindSession {
		return nil, fmt.Errorf("%w: %s (the container of that name is not a vak session)", ErrNoSession, id)
	}
	r := &record{ID: id, Container: c.ID, Name: SessionPrefix + id, Workspace: c.Config.Labels[engine.LabelWorkspace],
		Image: c.Config.Labels[LabelImage], User: c.Config.User, Owner: c.Config.Labels[LabelOwnerProc],
		Install: c.Config.Labels[LabelInstall] == "true", Pool: c.Config.Labels[LabelPool], Docker: c.Config.Labels[LabelDocker] == "true",
		DockerSlot: c.Config.Labels[LabelDockerSlot]}
	for _, mp := range c.Mounts {
		if mp.Destination == ContainerRunDir {
			r.RunDir = mp.Source
		}
		// A workspace-write session has a watcher (unless an older vak
		// made it; then its watch state is missing and calls fail
		// closed, saying so).
		r.Watched = r.Watched || (mp.Destination == r.Workspace && mp.RW)
	}
	if r.RunDir == "" {
		return nil, fmt.Errorf("%w: %s has no session socket directory", ErrNoSession, id)
	}
	if n, err := strconv.ParseInt(c.Config.Labels[LabelCreated], 10, 64); err == nil {
		r.Created = time.Unix(n, 0)
	}
	for _, kv := range c.Config.Env {
		if !strings.HasPrefix(kv, worker.SpecEnv+"=") {
			r.Env = append(r.Env, kv)
		}
		if h, ok := strings.CutPrefix(kv, "HOME="); ok {
			r.AgentHome = h
		}
	}
	if p, err := m.recordPath(id); err == nil {
		writeJSON(p, r)
	}
	return r, nil
}

// makeRunDir creates a per-session socket directory, 0700 and owned by the
// session's user (the worker creates its socket there).
func (m *Manager) makeRunDir(slot string) (string, error) {
	d, err := m.stateDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(d, "run", slot)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("session socket directory: %w", err)
	}
	uid, gid := m.user().IDs()
	if uid != os.Getuid() || gid != os.Getgid() {
		if err := os.Chown(dir, uid, gid); err != nil {
			os.Remove(dir)
			return "", fmt.Errorf("session socket directory: the session's user %d:%d must own it: %w", uid, gid, err)
		}
	}
	return dir, nil
}
