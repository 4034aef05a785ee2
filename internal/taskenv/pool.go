package taskenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// The warm pool keeps started session containers ready, so creating a
// session costs a rename instead of a create and start. A pool container is
// made for one pool key: everything fixed when a container is created (image
// ID, workspace and every other mount with its identity, limits, network
// policy, mode, user, environment, lifetimes, worker binary, labels). It is
// claimed by renaming it to the session's name under the state directory's
// lock, by its pool name, so exactly one Create gets it; it is never
// returned to the pool: Discard removes it like any session. A pool
// container's lifetime counts from when it was made, and an unclaimed one
// ends by the idle timeout like any session (gc then removes it).

// poolKey identifies the containers that can serve plan p.
func (m *Manager) poolKey(p *plan) (string, error) {
	fi, err := os.Stat(p.worker)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrWorkerBinary, err)
	}
	var wdev, wino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		wdev, wino = uint64(st.Dev), uint64(st.Ino)
	}
	labels := make([]string, 0, len(m.Labels))
	for k, v := range m.Labels {
		labels = append(labels, k+"="+v)
	}
	slices.Sort(labels)
	material := struct {
		Image, Workspace, Network, Policy, User, Home string
		Mode                                          sandbox.Mode
		Limits                                        sandbox.Limits
		Env, Protected, Labels                        []string
		Mounts                                        []worker.MountIdentity
		Install                                       bool
		Idle, Lifetime, DefaultTimeout                time.Duration
		Worker                                        string
		WorkerDev, WorkerIno, WorkerSize              uint64
		WorkerMtime                                   int64
	}{p.imageID, p.spec.Workspace, string(p.spec.NetworkPolicy), p.policy, p.user.Spec(), p.home,
		p.spec.Mode, p.limits, p.env, p.protected, labels, p.identity, p.install,
		m.idle(), m.lifetime(), p.spec.DefaultTimeout,
		p.worker, wdev, wino, uint64(fi.Size()), fi.ModTime().UnixNano()}
	data, err := json.Marshal(material)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:12]), nil
}

// lock takes the state directory's lock (claims and snapshot tags).
func (m *Manager) lock() (func(), error) {
	d, err := m.stateDir()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(d, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("session lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("session lock: %w", err)
	}
	return func() { f.Close() }, nil
}

func (m *Manager) poolDir(key string) (string, error) {
	d, err := m.stateDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(d, "pool", key)
	return dir, os.MkdirAll(dir, 0o700)
}

// FillPool starts containers for spec until PoolSize are ready for its pool
// key, and returns how many it started. It is how a broker keeps the pool
// warm: call it after Create (the CLI does after `session create`).
func (m *Manager) FillPool(ctx context.Context, spec Spec) (int, error) {
	if m.PoolSize <= 0 {
		return 0, nil
	}
	cli, err := m.engine()
	if err != nil {
		return 0, err
	}
	spec.OwnerPID = 0 // pool containers belong to no process
	p, err := m.prepare(ctx, cli, spec)
	if err != nil {
		return 0, err
	}
	key, err := m.poolKey(p)
	if err != nil {
		return 0, err
	}
	dir, err := m.poolDir(key)
	if err != nil {
		return 0, err
	}
	entries, _ := os.ReadDir(dir)
	have := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			have++
		}
	}
	made := 0
	for ; have+made < m.PoolSize; made++ {
		if err := m.createPooled(ctx, cli, p, key, dir); err != nil {
			return made, err
		}
	}
	return made, nil
}

func (m *Manager) createPooled(ctx context.Context, cli *client.Client, p *plan, key, dir string) (err error) {
	slot := randomHex(8)
	runDir, err := m.makeRunDir(slot)
	if err != nil {
		return err
	}
	created := time.Now().Truncate(time.Second)
	cfg, hc, err := m.containerConfig(p, "", runDir, key, "", created)
	if err != nil {
		os.RemoveAll(runDir)
		return err
	}
	name := PoolPrefix + key[:12] + "-" + slot
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		os.RemoveAll(runDir)
		return apiErr("create pool container", err)
	}
	defer func() {
		if err != nil {
			m.removeContainer(res.ID, runDir, "")
		}
	}()
	if p.spec.Mode == sandbox.WorkspaceWrite {
		if _, err = cli.CopyToContainer(ctx, res.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(homeArchive(p.user))}); err != nil {
			return apiErr("create the session's home", err)
		}
	}
	if _, err = cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return apiErr("start pool container", err)
	}
	// Ready when its worker answers on the socket.
	rec := &record{Container: res.ID, Name: name, RunDir: runDir, Workspace: p.spec.Workspace, Image: p.imageID,
		User: p.user.Spec(), Home: p.home, Env: p.env, Install: p.install, Created: created, Pool: key}
	deadline := time.Now().Add(wire.DefaultStartTimeout)
	for {
		var conn interface{ Close() error }
		c, derr := dialWorker(ctx, runDir, res.ID)
		if derr == nil {
			conn = c
			wc := wire.NewClient(halfCloser{c}, c)
			derr = wc.WaitReady(ctx)
			wc.Close(ctx)
			conn.Close()
			if derr == nil {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil || errors.Is(derr, ErrUntrustedPeer) || errors.Is(derr, ErrUnsupported) {
			return m.startErr(res.ID, "", derr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return writeJSON(filepath.Join(dir, slot+".json"), rec)
}

// claim hands a ready pool container for p to a new session, or returns
// nil, nil when none is there.
func (m *Manager) claim(ctx context.Context, cli *client.Client, p *plan) (*Session, error) {
	key, err := m.poolKey(p)
	if err != nil {
		return nil, err
	}
	dir, err := m.poolDir(key)
	if err != nil {
		return nil, err
	}
	var owner string
	if p.spec.OwnerPID > 0 {
		if owner, err = docker.OwnerToken(p.spec.OwnerPID); err != nil {
			return nil, err
		}
	}
	for {
		rec, err := m.claimOne(ctx, cli, p, dir, owner)
		if rec == nil || err != nil {
			return nil, err
		}
		conn, err := dialWorker(ctx, rec.RunDir, rec.Container)
		if err == nil {
			wc := wire.NewClient(halfCloser{conn}, conn)
			if err = wc.WaitReady(ctx); err == nil {
				s := &Session{m: m, rec: rec, client: wc, conn: conn}
				m.remember(s)
				return s, nil
			}
			conn.Close()
		}
		// A pooled container that died (idle timeout) is removed; try the next.
		m.removeContainer(rec.Container, rec.RunDir, rec.ID)
	}
}

// claimOne renames the oldest pool entry to the session's name, under the
// lock, and writes the session record.
func (m *Manager) claimOne(ctx context.Context, cli *client.Client, p *plan, dir, owner string) (*record, error) {
	unlock, err := m.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		slotFile := filepath.Join(dir, e.Name())
		var rec record
		if err := readJSON(slotFile, &rec); err != nil {
			os.Remove(slotFile)
			continue
		}
		name := SessionPrefix + p.id
		_, err := cli.ContainerRename(ctx, rec.Name, client.ContainerRenameOptions{NewName: name})
		if err != nil {
			if cerrdefs.IsConflict(err) {
				return nil, fmt.Errorf("%w: %s (task %q in %s); remove it first (vak session rm %s) or use another task name", ErrSessionExists, p.id, p.spec.Task, p.spec.Workspace, p.id)
			}
			if cerrdefs.IsNotFound(err) {
				os.Remove(slotFile)
				continue
			}
			return nil, apiErr("claim pool container", err)
		}
		os.Remove(slotFile)
		rec.ID, rec.Name, rec.Owner = p.id, name, owner
		rp, err := m.recordPath(p.id)
		if err != nil {
			return nil, err
		}
		if err := writeJSON(rp, &rec); err != nil {
			m.removeContainer(rec.Container, rec.RunDir, "")
			return nil, fmt.Errorf("session record: %w", err)
		}
		return &rec, nil
	}
	return nil, nil
}
