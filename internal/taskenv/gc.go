package taskenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"vak/internal/engine"
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
	// Skipped are the containers GC would have removed but the daemon
	// refused because they are in use (already being removed by another
	// command, a volume still mounted); Reason says what it answered.
	Skipped []Removed
	// Kept counts the live sessions and pool containers left alone.
	Kept int
}

// inUse reports a removal the daemon refused because the object is in use
// (409 Conflict: a container already being removed, a mounted volume).
func inUse(err error) bool { return cerrdefs.IsConflict(err) }

// QuietGC is GC before a session command: best effort and bounded (a
// daemon that is down is reported by the command itself).
func (m *Manager) QuietGC(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m.GC(ctx)
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
		if id != "" {
			m.sweepEnded(ctx, id) // the final sweep, before the container goes
		}
		if err := m.removeContainer(c.ID, runDir, id); inUse(err) {
			rep.Skipped = append(rep.Skipped, Removed{Name: name, ID: id, Reason: err.Error()})
			continue
		} else if err != nil {
			return rep, err
		}
		if id != "" {
			m.dropWatch(id)
		}
		if c.Labels[LabelDocker] == "true" {
			// The sidecar of its docker slot (a pool pair's too); a
			// container made before the label existed: the session ID.
			key := c.Labels[LabelDockerSlot]
			if key == "" {
				key = id
			}
			if ValidDockerSlot(key) {
				if err := m.removeSidecar(key); inUse(err) {
					rep.Skipped = append(rep.Skipped, Removed{Name: SidecarPrefix + key, Reason: err.Error()})
				} else if err != nil {
					return rep, err
				}
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
	m.gcWatches(ctx, cli)
	m.gcRecords(ctx, cli)
	if err := m.gcRuns(ctx, cli, rep); err != nil {
		return rep, err
	}
	if err := m.gcSweeps(ctx, cli, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// gcSidecars removes this user's nested Docker sidecars (vak-dockerd-KEY,
// labelled vak.docker=true and vak.session=KEY with the manager's labels,
// KEY a docker slot key) that no session or pool container uses (removed by
// hand, or by a crash between the sidecar's start and its container's),
// with their volumes. A container uses the sidecar when its vak.docker.slot
// label is KEY, or (made before that label) when it is named
// vak-session-KEY. A sidecar without a container is left alone while a
// create or pool fill may still be starting it: unless a session record or
// pool entry names it (the pair was complete), only once it is older than
// the sidecar's start timeout plus the GC grace.
func (m *Manager) gcSidecars(ctx context.Context, cli *client.Client, rep *GCReport) error {
	f := make(client.Filters).Add("label", LabelDocker+"=true", LabelOwner+"="+strconv.Itoa(os.Getuid()))
	for k, v := range m.Labels {
		f.Add("label", k+"="+v)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return engine.APIError("list Docker sidecars", err)
	}
	grace := gcGrace + DefaultSidecarTimeout
	if m.SidecarTimeout > 0 {
		grace = gcGrace + m.SidecarTimeout
	}
	// Docker slots used by session and pool containers, and named by
	// records and pool entries.
	used, recorded := map[string]bool{}, m.recordedSlots()
	for _, c := range res.Items {
		if c.Labels[engine.LabelManaged] == "true" && c.Labels[engine.LabelKind] == KindSession {
			if k := c.Labels[LabelDockerSlot]; k != "" {
				used[k] = true
			}
			for _, n := range c.Names {
				if id, ok := strings.CutPrefix(strings.TrimPrefix(n, "/"), SessionPrefix); ok {
					used[id] = true
				}
			}
		}
	}
	for _, c := range res.Items {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		key, ok := strings.CutPrefix(name, SidecarPrefix)
		if !ok || !ValidDockerSlot(key) || c.Labels[LabelSession] != key || c.Labels[engine.LabelKind] == KindSession {
			continue // not named as ours: not ours to judge
		}
		if used[key] {
			continue // its container is there: the session's own GC decides
		}
		// Also when that container does not carry the manager's labels.
		if inUse, err := slotInUse(ctx, cli, key); err != nil {
			return err
		} else if inUse {
			continue
		}
		if !recorded[key] && time.Since(time.Unix(c.Created, 0)) < grace {
			rep.Kept++
			continue
		}
		if err := m.removeSidecar(key); inUse(err) {
			rep.Skipped = append(rep.Skipped, Removed{Name: name, Reason: err.Error()})
			continue
		} else if err != nil {
			return err
		}
		id := ""
		if ValidID(key) {
			id = key
		}
		rep.Removed = append(rep.Removed, Removed{Name: name, ID: id, Reason: "its session container is gone"})
	}
	return nil
}

// slotInUse reports whether a session or pool container uses docker slot
// key (labelled with it, or named vak-session-KEY), whatever its other
// labels.
func slotInUse(ctx context.Context, cli *client.Client, key string) (bool, error) {
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelDockerSlot+"="+key)})
	if err != nil {
		return false, engine.APIError("list the containers of docker slot "+key, err)
	}
	if len(res.Items) > 0 {
		return true, nil
	}
	if !ValidID(key) {
		return false, nil
	}
	if _, err := cli.ContainerInspect(ctx, SessionPrefix+key, client.ContainerInspectOptions{}); err == nil {
		return true, nil
	} else if !cerrdefs.IsNotFound(err) {
		return false, engine.APIError("inspect session "+key, err)
	}
	return false, nil
}

// recordedSlots are the docker slot keys named by this user's session
// records and pool entries.
func (m *Manager) recordedSlots() map[string]bool {
	out := map[string]bool{}
	d, err := m.stateDir()
	if err != nil {
		return out
	}
	add := func(f string) {
		var rec record
		if readJSON(f, &rec) != nil || !rec.Docker {
			return
		}
		if k, err := rec.dockerSlot(); err == nil {
			out[k] = true
		}
	}
	entries, _ := os.ReadDir(d)
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok && ValidID(id) {
			add(filepath.Join(d, e.Name()))
		}
	}
	pools, _ := os.ReadDir(filepath.Join(d, "pool"))
	for _, p := range pools {
		slots, _ := os.ReadDir(filepath.Join(d, "pool", p.Name()))
		for _, s := range slots {
			if strings.HasSuffix(s.Name(), ".json") {
				add(filepath.Join(d, "pool", p.Name(), s.Name()))
			}
		}
	}
	return out
}

// gcRuns removes this user's command containers (vak-run-*, labelled
// vak.kind=run with the manager's labels) whose owner process is gone. A
// run container whose owner is alive, or that carries no owner process
// (made by an older vak, or on a host where it cannot be judged), is left
// alone: its command's docker CLI removes it (--rm).
func (m *Manager) gcRuns(ctx context.Context, cli *client.Client, rep *GCReport) error {
	f := make(client.Filters).Add("label", engine.LabelManaged+"=true", engine.LabelKind+"=run", LabelOwner+"="+strconv.Itoa(os.Getuid()))
	for k, v := range m.Labels {
		f.Add("label", k+"="+v)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return engine.APIError("list command containers", err)
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
		if alive, known := engine.OwnerAlive(owner); !known || alive {
			rep.Kept++
			continue
		}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); inUse(err) {
			rep.Skipped = append(rep.Skipped, Removed{Name: name, Reason: err.Error()})
			continue
		} else if err != nil && !cerrdefs.IsNotFound(err) {
			return engine.APIError("remove command container "+name, err)
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
		if alive, known := engine.OwnerAlive(owner); known && !alive {
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
