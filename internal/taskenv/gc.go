package taskenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"vak/internal/sandbox/docker"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// GC removes this user's sessions that are over, and only those: it looks
// only at containers labelled vak.managed=true and vak.kind=session, owned
// by this uid, named vak-session-* or vak-pool-*, and carrying the
// manager's labels. A session is over when its container is not running
// (the worker died or ended itself on its idle timeout or lifetime), it is
// past its maximum lifetime, its socket shows no use for longer than its
// idle timeout, or the process that owned it is gone. A broker killed with
// SIGKILL leaves its sessions behind; GC is what removes them. GC also
// removes this user's command containers (vak-run-*) whose owner process
// is gone (gcRuns).

// gcGrace is added to the idle timeout before the host declares a session
// idle (the worker itself ends first), and is how long a created but not yet
// started container is left alone (a Create in progress).
const gcGrace = 2 * time.Minute

// Removed is one container GC removed.
type Removed struct {
	Name   string
	ID     string // session ID, if it is a session
	Reason string
}

// GCReport says what GC did.
type GCReport struct {
	Removed []Removed
	// Kept counts the live sessions and pool containers left alone.
	Kept int
}

// GC removes every session and pool container that is over (see above),
// and the host-side leftovers (records and socket directories) of sessions
// whose containers are gone.
func (m *Manager) GC(ctx context.Context) (*GCReport, error) {
	cli, err := m.engine()
	if err != nil {
		return nil, err
	}
	res, err := m.listContainers(ctx, cli)
	if err != nil {
		return nil, err
	}
	rep := &GCReport{}
	now := time.Now()
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		id, isSession := strings.CutPrefix(name, SessionPrefix)
		if !isSession {
			id = ""
			if !strings.HasPrefix(name, PoolPrefix) {
				continue // renamed by someone else: not ours to judge
			}
		}
		runDir := ""
		for _, mp := range c.Mounts {
			if mp.Destination == ContainerRunDir {
				runDir = mp.Source
			}
		}
		owner := c.Labels[LabelOwnerProc]
		if id != "" && owner == "" {
			if rec, err := m.readRecord(id); err == nil {
				owner = rec.Owner
			}
		}
		reason := over(c, runDir, owner, now)
		if reason == "" {
			rep.Kept++
			continue
		}
		if err := m.removeContainer(c.ID, runDir, id); err != nil {
			return rep, err
		}
		if c.Labels[LabelDocker] == "true" && id != "" {
			if err := m.removeSidecar(id); err != nil {
				return rep, err
			}
		}
		if pool := c.Labels[LabelPool]; pool != "" && id == "" {
			if d, err := m.stateDir(); err == nil {
				removePoolEntry(filepath.Join(d, "pool", pool), c.ID)
			}
		}
		rep.Removed = append(rep.Removed, Removed{Name: name, ID: id, Reason: reason})
	}
	// Before gcRecords: a sidecar's record says its session was complete.
	if err := m.gcSidecars(ctx, cli, rep); err != nil {
		return rep, err
	}
	m.gcRecords(ctx, cli)
	if err := m.gcRuns(ctx, cli, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// gcSidecars removes this user's nested Docker sidecars (vak-dockerd-ID,
// labelled vak.docker=true with the manager's labels) whose session
// container is gone (removed by hand, or by a crash between the sidecar's
// start and the session's), with their volumes. A sidecar without a
// session container is left alone while a create may still be starting it:
// unless the session's record exists (the session was complete), only once
// it is older than the sidecar's start timeout plus the GC grace.
func (m *Manager) gcSidecars(ctx context.Context, cli *client.Client, rep *GCReport) error {
	f := make(client.Filters).Add("label", LabelDocker+"=true", LabelOwner+"="+strconv.Itoa(os.Getuid()))
	for k, v := range m.Labels {
		f.Add("label", k+"="+v)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return apiErr("list Docker sidecars", err)
	}
	grace := gcGrace + DefaultSidecarTimeout
	if m.SidecarTimeout > 0 {
		grace = gcGrace + m.SidecarTimeout
	}
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		id, ok := strings.CutPrefix(name, SidecarPrefix)
		if !ok || !ValidID(id) || c.Labels[LabelSession] != id {
			continue // not named as ours: not ours to judge
		}
		if _, err := cli.ContainerInspect(ctx, SessionPrefix+id, client.ContainerInspectOptions{}); err == nil {
			continue // its session is there: the session's own GC decides
		} else if !cerrdefs.IsNotFound(err) {
			return apiErr("inspect session "+id, err)
		}
		_, recErr := m.readRecord(id)
		if recErr != nil && time.Since(time.Unix(c.Created, 0)) < grace {
			rep.Kept++
			continue
		}
		if err := m.removeSidecar(id); err != nil {
			return err
		}
		rep.Removed = append(rep.Removed, Removed{Name: name, ID: id, Reason: "its session container is gone"})
	}
	return nil
}

// gcRuns removes this user's command containers (vak-run-*, labelled
// vak.kind=run with the manager's labels) whose owner process is gone. A
// run container whose owner is alive, or that carries no owner process
// (made by an older vak, or on a host where it cannot be judged), is left
// alone: its command's docker CLI removes it (--rm).
func (m *Manager) gcRuns(ctx context.Context, cli *client.Client, rep *GCReport) error {
	f := make(client.Filters).Add("label", docker.LabelManaged+"=true", docker.LabelKind+"=run", LabelOwner+"="+strconv.Itoa(os.Getuid()))
	for k, v := range m.Labels {
		f.Add("label", k+"="+v)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return apiErr("list command containers", err)
	}
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		owner := c.Labels[LabelOwnerProc]
		if !strings.HasPrefix(name, docker.NamePrefix) || owner == "" {
			continue
		}
		if alive, known := docker.OwnerAlive(owner); !known || alive {
			rep.Kept++
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return apiErr("remove command container "+name, err)
		}
		rep.Removed = append(rep.Removed, Removed{Name: name, Reason: "its owner process is gone"})
	}
	return nil
}

// over says why container c is over, or "" if it is live.
func over(c container.Summary, runDir, owner string, now time.Time) string {
	created := time.Time{}
	if n, err := strconv.ParseInt(c.Labels[LabelCreated], 10, 64); err == nil {
		created = time.Unix(n, 0)
	}
	switch c.State {
	case container.StateRunning, container.StatePaused, container.StateRestarting:
	case container.StateCreated:
		if now.Sub(created) < gcGrace {
			return "" // being created right now
		}
		return "never started"
	default:
		return "ended (" + c.Status + ")"
	}
	if life, err := strconv.ParseInt(c.Labels[LabelLifetime], 10, 64); err == nil && life > 0 && !created.IsZero() {
		if now.Sub(created) >= time.Duration(life)*time.Second {
			return fmt.Sprintf("past its maximum lifetime (%v)", time.Duration(life)*time.Second)
		}
	}
	if owner != "" {
		if alive, known := docker.OwnerAlive(owner); known && !alive {
			return "its owner process is gone"
		}
	}
	if idle, err := strconv.ParseInt(c.Labels[LabelIdle], 10, 64); err == nil && idle > 0 && runDir != "" {
		if fi, err := os.Lstat(filepath.Join(runDir, socketName)); err == nil {
			if d := now.Sub(fi.ModTime()); d >= time.Duration(idle)*time.Second+gcGrace {
				return fmt.Sprintf("idle for %v", d.Round(time.Second))
			}
		}
	}
	return ""
}

// gcRecords removes records and socket directories whose containers are
// gone, and stale pool entries.
func (m *Manager) gcRecords(ctx context.Context, cli *client.Client) {
	d, err := m.stateDir()
	if err != nil {
		return
	}
	gone := func(cid string) bool {
		_, err := cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
		return err != nil && cerrdefs.IsNotFound(err)
	}
	entries, _ := os.ReadDir(d)
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !ValidID(id) {
			continue
		}
		if rec, err := m.readRecord(id); err == nil && gone(rec.Container) {
			os.RemoveAll(rec.RunDir)
			os.Remove(filepath.Join(d, e.Name()))
		}
	}
	pools, _ := os.ReadDir(filepath.Join(d, "pool"))
	for _, p := range pools {
		dir := filepath.Join(d, "pool", p.Name())
		slots, _ := os.ReadDir(dir)
		for _, s := range slots {
			var rec record
			f := filepath.Join(dir, s.Name())
			if readJSON(f, &rec) == nil && gone(rec.Container) {
				os.RemoveAll(rec.RunDir)
				os.Remove(f)
			}
		}
		os.Remove(dir) // only if empty
	}
}

// removePoolEntry drops the pool entry of container cid.
func removePoolEntry(dir, cid string) {
	slots, _ := os.ReadDir(dir)
	for _, s := range slots {
		var rec record
		f := filepath.Join(dir, s.Name())
		if readJSON(f, &rec) == nil && rec.Container == cid {
			os.Remove(f)
		}
	}
}
