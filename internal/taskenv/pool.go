package taskenv

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/sandbox"
	"vak/internal/shellquote"
	"vak/internal/trace"
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

// poolKey identifies the containers that can serve plan p. For a --docker
// plan it also holds what the sidecar of a pool pair was started with and
// cannot change: the sidecar image's ID, the nested pool, the gateway, the
// netclient's namespace, the trust dir binds and CA variables, and the
// placeholders the guard propagates.
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
		Image, Workspace, Network, Policy, User string
		AgentHome                               string `json:"Home"` // the key's JSON predates the name
		Mode                                    sandbox.Mode
		Limits                                  sandbox.Limits
		Env, Protected, Labels                  []string
		Mounts                                  []worker.MountIdentity
		Install                                 bool
		Idle, Lifetime, DefaultTimeout          time.Duration
		Worker                                  string
		WorkerDev, WorkerIno, WorkerSize        uint64
		WorkerMtime                             int64
		Docker                                  *dockerKey `json:",omitempty"`
		Runtime                                 string     `json:",omitempty"`
	}{p.imageID, p.spec.Workspace, string(p.spec.NetworkPolicy), p.policy, p.user.Spec(), p.home,
		p.spec.Mode, p.limits, p.env, p.protected, labels, mountKeys(p.identity), p.install,
		m.idle(), m.lifetime(), p.spec.DefaultTimeout,
		p.worker, wdev, wino, uint64(fi.Size()), fi.ModTime().UnixNano(), nil, p.runtime}
	if p.spec.Docker {
		if material.Docker, err = dockerPoolKey(p); err != nil {
			return "", err
		}
		material.Docker.Baseline = string(m.baseline())
	}
	data, err := json.Marshal(material)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:12]), nil
}

// mountKeys are the mounts' paths, devices, inodes and types: what a pool key
// compares (a pooled container's worker checked the attributes when it
// started; the workspace's times change with every file made in it, and
// would make every key new).
func mountKeys(ids []worker.MountIdentity) []worker.MountIdentity {
	out := make([]worker.MountIdentity, len(ids))
	for i, id := range ids {
		out[i] = worker.MountIdentity{Path: id.Path, Dev: id.Dev, Ino: id.Ino, Type: id.Type}
	}
	return out
}

// dockerKey is the --docker part of a pool key.
type dockerKey struct {
	SidecarImage, NestedPool, Gateway, NetworkMode, TrustCA, Baseline string
	TrustEnv, Binds, Propagated                                       []string
}

func dockerPoolKey(p *plan) (*dockerKey, error) {
	att := p.net
	if p.dockerImage == "" || att == nil || !att.NestedPool.IsValid() || !att.Gateway.IsValid() {
		return nil, fmt.Errorf("%w: a --docker pool key needs the sidecar image's ID and the nested network", ErrDockerUnavailable)
	}
	env, err := propagated(att, p.spec.DockerPlaceholders)
	if err != nil {
		return nil, err
	}
	return &dockerKey{SidecarImage: p.dockerImage, NestedPool: att.NestedPool.String(), Gateway: att.Gateway.String(),
		NetworkMode: att.Mode, TrustCA: att.TrustCA, TrustEnv: att.TrustEnv, Binds: att.Binds, Propagated: env}, nil
}

// pinDockerImage resolves the sidecar image to its ID (part of a --docker
// pool key; a pair's sidecar must run exactly that image).
func (m *Manager) pinDockerImage(ctx context.Context, cli *client.Client, p *plan) error {
	if !p.spec.Docker {
		return nil
	}
	if m.DockerImage == "" {
		return fmt.Errorf("%w: no sidecar image configured", ErrDockerUnavailable)
	}
	ii, err := cli.ImageInspect(ctx, m.DockerImage)
	if err != nil {
		return engine.APIError("inspect the sidecar image "+m.DockerImage, err)
	}
	p.dockerImage = ii.ID
	return nil
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
	defer p.releaseNet() // the pool's containers keep the network
	if err := m.pinDockerImage(ctx, cli, p); err != nil {
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

// createPooled makes one pool entry for p: a started container whose
// worker answers and, for a --docker plan, first its sidecar (in a docker
// slot of its own, PoolSlotPrefix + the entry's slot) answering through
// the guard: the pair is claimed together.
func (m *Manager) createPooled(ctx context.Context, cli *client.Client, p *plan, key, dir string) (err error) {
	slot := randomHex(8)
	dslot := ""
	if p.spec.Docker {
		dslot = PoolSlotPrefix + slot
		if err := m.startSidecar(ctx, cli, p, dslot); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				m.removeSidecar(dslot)
			}
		}()
	}
	runDir, err := m.makeRunDir(slot)
	if err != nil {
		return err
	}
	created := time.Now().Truncate(time.Second)
	cfg, hc, err := m.containerConfig(p, "", runDir, key, dslot, created)
	if err != nil {
		os.RemoveAll(runDir)
		return err
	}
	name := PoolPrefix + key[:12] + "-" + slot
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		os.RemoveAll(runDir)
		return engine.APIError("create pool container", err)
	}
	defer func() {
		if err != nil {
			m.removeContainer(res.ID, runDir, "")
		}
	}()
	if p.spec.Mode == sandbox.WorkspaceWrite {
		if _, err = cli.CopyToContainer(ctx, res.ID, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(homeArchive(p.user))}); err != nil {
			return engine.APIError("create the session's home", err)
		}
	}
	if _, err = cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return engine.APIError("start pool container", err)
	}
	// Ready when its worker answers on the socket.
	rec := &record{Container: res.ID, Name: name, RunDir: runDir, Workspace: p.spec.Workspace, Image: p.imageID,
		User: p.user.Spec(), AgentHome: p.home, Env: p.env, Install: p.install, Created: created, Pool: key,
		Docker: p.spec.Docker, DockerSlot: dslot}
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
// nil, nil when none is there. A --docker pair is handed over only once
// claimPair has checked its sidecar.
func (m *Manager) claim(ctx context.Context, cli *client.Client, p *plan) (*Session, error) {
	if p.spec.Docker && m.DockerImage == "" {
		return nil, nil // the cold create names what is missing
	}
	tr := trace.From(ctx)
	end := tr.Begin("claim: sidecar image ID")
	err := m.pinDockerImage(ctx, cli, p)
	end()
	if err != nil {
		return nil, err
	}
	end = tr.Begin("claim: pool key")
	key, err := m.poolKey(p)
	end()
	if err != nil {
		return nil, err
	}
	dir, err := m.poolDir(key)
	if err != nil {
		return nil, err
	}
	var owner string
	if p.spec.OwnerPID > 0 {
		if owner, err = engine.OwnerToken(p.spec.OwnerPID); err != nil {
			return nil, err
		}
	}
	for {
		end := tr.Begin("claim: lock + rename")
		rec, poolName, err := m.claimOne(ctx, cli, p, dir, owner)
		end()
		if rec == nil || err != nil {
			return nil, err
		}
		end = tr.Begin("claim: worker ready")
		wc, conn, err := readyWorker(ctx, rec)
		end()
		if err != nil {
			// A pooled container that died (idle timeout) is removed; try the next.
			m.dropClaimed(rec)
			continue
		}
		if p.spec.Docker {
			end := tr.Begin("claim: pair check")
			err := m.claimPair(ctx, cli, p, rec, wc)
			end()
			if err != nil {
				// Not exactly what a cold create would start, or not
				// answering: the pair goes; try the next.
				conn.Close()
				m.dropClaimed(rec)
				if m.OnPoolReject != nil {
					m.OnPoolReject(poolName, err)
				}
				continue
			}
		}
		s := &Session{m: m, rec: rec, client: wc, conn: conn}
		m.remember(s)
		return s, nil
	}
}

// readyWorker connects to the worker of a claimed pool container and waits
// until it answers.
func readyWorker(ctx context.Context, rec *record) (*wire.Client, net.Conn, error) {
	conn, err := dialWorker(ctx, rec.RunDir, rec.Container)
	if err != nil {
		return nil, nil, err
	}
	wc := wire.NewClient(halfCloser{conn}, conn)
	if err := wc.WaitReady(ctx); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return wc, conn, nil
}

// dropClaimed removes a claimed pool container that is not handed out, and
// its pool pair's sidecar.
func (m *Manager) dropClaimed(rec *record) {
	m.removeContainer(rec.Container, rec.RunDir, rec.ID)
	if rec.Docker {
		if key, kerr := rec.dockerSlot(); kerr == nil && key != rec.ID {
			m.removeSidecar(key)
		}
	}
}

// claimPair checks the sidecar of a claimed --docker pool pair before the
// session is handed out: its docker slot is a pool slot, the session
// container is labelled with it and mounts that slot's socket volume
// read-only, the sidecar is exactly the one a cold create would start for
// p in that slot (image ID, network mode, guard command line with its
// policy, runtime, capabilities, seccomp, private cgroup namespace, mounts,
// limits), it runs, the netclient whose namespace it shares runs, is not
// paused and was not started again after it (the exec check), and
// `docker info` answers through its guard, asked from inside the session
// by its worker (wc) on the socket the session's commands use.
//
// The three inspects and the guard's answer are independent: they are
// asked at once, and every check is made on what they returned.
func (m *Manager) claimPair(ctx context.Context, cli *client.Client, p *plan, rec *record, wc *wire.Client) error {
	key, err := rec.dockerSlot()
	if err != nil {
		return err
	}
	if !poolSlotRe().MatchString(key) {
		return fmt.Errorf("%w: pool entry %s: docker slot %q is not a pool slot", ErrDockerUnavailable, rec.Name, key)
	}
	want, err := m.dockerSidecar(p, key)
	if err != nil {
		return err
	}
	cfg, hc, err := want.Spec()
	if err != nil {
		return err
	}
	ncName, inNamespace := strings.CutPrefix(string(hc.NetworkMode), "container:")
	if !inNamespace {
		return fmt.Errorf("%w: pool sidecar %s: a cold create's network mode is %q, not a netclient's namespace", ErrDockerUnavailable, want.Name, hc.NetworkMode)
	}
	tr := trace.From(ctx)
	var (
		sc, sess, nc          client.ContainerInspectResult
		scErr, sessErr, ncErr error
		pingErr               error
		wg                    sync.WaitGroup
	)
	inspect := func(name string, res *client.ContainerInspectResult, err *error) {
		*res, *err = cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	}
	wg.Go(func() {
		defer tr.Begin("claim: pair check: inspect sidecar, session, netclient")()
		var iw sync.WaitGroup
		iw.Go(func() { inspect(want.Name, &sc, &scErr) })
		iw.Go(func() { inspect(rec.Container, &sess, &sessErr) })
		iw.Go(func() { inspect(ncName, &nc, &ncErr) })
		iw.Wait()
	})
	wg.Go(func() {
		defer tr.Begin("claim: pair check: docker info through the guard (worker)")()
		pingErr = guardPing(ctx, wc)
	})
	wg.Wait()
	if scErr != nil {
		return engine.APIError("inspect the pool's sidecar "+want.Name, scErr)
	}
	if sessErr != nil {
		return engine.APIError("inspect the pool container", sessErr)
	}
	if sess.Container.Config == nil || sess.Container.Config.Labels[LabelDockerSlot] != key {
		return fmt.Errorf("%w: pool container %s is not labelled with docker slot %s", ErrDockerUnavailable, rec.Name, key)
	}
	if err := mountsSocketVolume(sess.Container, key); err != nil {
		return fmt.Errorf("%w: pool container %s: %w", ErrDockerUnavailable, rec.Name, err)
	}
	if ncErr != nil {
		return fenceHolds(rec, ncName, nc, ncErr, "")
	}
	// The daemon records container:NAME as container:ID.
	if sc.Container.HostConfig != nil && string(sc.Container.HostConfig.NetworkMode) == "container:"+nc.Container.ID {
		hc.NetworkMode = sc.Container.HostConfig.NetworkMode
	}
	if err := sameSidecar(sc.Container, p.dockerImage, cfg, hc); err != nil {
		return fmt.Errorf("%w: pool sidecar %s: %w", ErrDockerUnavailable, want.Name, err)
	}
	// The exec check (checkSidecar), on what was inspected above.
	if err := sidecarRunning(rec, want.Name, sc.Container.State); err != nil {
		return err
	}
	if err := fenceHolds(rec, ncName, nc, ncErr, sc.Container.State.StartedAt); err != nil {
		return err
	}
	if pingErr != nil {
		return fmt.Errorf("%w: pool sidecar %s: docker info through the guard: %w", ErrDockerUnavailable, want.Name, pingErr)
	}
	return nil
}

// guardPing asks the guard for `docker info` from inside the session: the
// worker runs `vak dockerguard ping` on the socket DOCKER_HOST names.
func guardPing(ctx context.Context, wc *wire.Client) error {
	res, err := wc.Bash(ctx, wire.BashArgs{
		Command:   shellquote.Join([]string{ContainerWorker, "dockerguard", "ping", ContainerDockerSocket}),
		TimeoutMS: DefaultSidecarTimeout.Milliseconds(),
	}, nil)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.Signal != "" || res.TimedOut {
		return fmt.Errorf("exit %d%s: %s", res.ExitCode, res.Signal, strings.TrimSpace(res.Stderr+" "+res.Stdout))
	}
	return nil
}

// mountsSocketVolume checks that a session container mounts the socket
// volume of docker slot key, read-only, at ContainerDockerDir (the guard
// socket its commands and the claim's check use).
func mountsSocketVolume(got container.InspectResponse, key string) error {
	_, _, sockVol := sidecarNames(key)
	if got.HostConfig != nil {
		for _, mt := range got.HostConfig.Mounts {
			if mt.Target == ContainerDockerDir {
				if mt.Type != mount.TypeVolume || mt.Source != sockVol || !mt.ReadOnly {
					return fmt.Errorf("%s is %s %s (read-only %t), want the volume %s read-only", ContainerDockerDir, mt.Type, mt.Source, mt.ReadOnly, sockVol)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("%s is not mounted (want the volume %s read-only)", ContainerDockerDir, sockVol)
}

// capSet normalises capability names as the daemon records them (CAP_
// prefix, upper case; ALL stays ALL), sorted.
func capSet(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		c = strings.ToUpper(c)
		if c != "ALL" && !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// lineDiff names the lines of got that differ from want (the entrypoint
// script: daemon.json, the guard's command line with its policy), each as
// a window around its first differing byte.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var out []string
	for i := 0; i < max(len(g), len(w)); i++ {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a == b {
			continue
		}
		j := 0
		for j < len(a) && j < len(b) && a[j] == b[j] {
			j++
		}
		win := func(s string) string {
			lo, hi := max(0, j-60), min(len(s), j+100)
			return strconv.Quote(s[lo:hi])
		}
		out = append(out, fmt.Sprintf("line %d has %s where a cold create has %s", i+1, win(a), win(b)))
	}
	return strings.Join(out, "; ")
}

// sameSidecar compares what the daemon recorded for a sidecar with the
// spec a cold create would use; the first difference is the error.
func sameSidecar(got container.InspectResponse, imageID string, cfg *container.Config, hc *container.HostConfig) error {
	if got.Config == nil || got.HostConfig == nil {
		return errors.New("no configuration recorded")
	}
	g, gh := got.Config, got.HostConfig
	diff := func(field string, a, b any) error {
		return fmt.Errorf("%s is %v, a cold create would use %v", field, a, b)
	}
	if got.Image != imageID {
		return diff("image", got.Image, imageID)
	}
	if a, b := append(slices.Clone(g.Entrypoint), g.Cmd...), append(slices.Clone(cfg.Entrypoint), cfg.Cmd...); !slices.Equal(a, b) {
		return fmt.Errorf("command line differs from a cold create's: %s", lineDiff(strings.Join(a, "\n"), strings.Join(b, "\n")))
	}
	if g.User != cfg.User {
		return diff("user", g.User, cfg.User)
	}
	for k, v := range cfg.Labels {
		if g.Labels[k] != v {
			return diff("label "+k, g.Labels[k], v)
		}
	}
	if gh.NetworkMode != hc.NetworkMode {
		return diff("network mode", gh.NetworkMode, hc.NetworkMode)
	}
	if gh.Runtime != hc.Runtime {
		return diff("runtime", gh.Runtime, hc.Runtime)
	}
	if gh.CgroupnsMode != container.CgroupnsModePrivate {
		return diff("cgroup namespace", gh.CgroupnsMode, container.CgroupnsModePrivate)
	}
	if gh.Privileged || !slices.Equal(capSet(gh.CapDrop), capSet(hc.CapDrop)) || !slices.Equal(capSet(gh.CapAdd), capSet(hc.CapAdd)) {
		return diff("capabilities", fmt.Sprint("add ", capSet(gh.CapAdd), " drop ", capSet(gh.CapDrop), " privileged=", gh.Privileged),
			fmt.Sprint("add ", capSet(hc.CapAdd), " drop ", capSet(hc.CapDrop)))
	}
	if !slices.Equal(gh.SecurityOpt, hc.SecurityOpt) {
		return errors.New("security options (seccomp profile) differ from a cold create's")
	}
	if gh.Memory != hc.Memory || gh.PidsLimit == nil || hc.PidsLimit == nil || *gh.PidsLimit != *hc.PidsLimit {
		return diff("limits", fmt.Sprint(gh.Memory, gh.PidsLimit), fmt.Sprint(hc.Memory, *hc.PidsLimit))
	}
	if len(gh.Mounts) != len(hc.Mounts) {
		return diff("mounts", len(gh.Mounts), len(hc.Mounts))
	}
	for i, mt := range hc.Mounts {
		gm := gh.Mounts[i]
		if gm.Type != mt.Type || gm.Source != mt.Source || gm.Target != mt.Target || gm.ReadOnly != mt.ReadOnly {
			return diff(fmt.Sprintf("mount %d", i), fmt.Sprintf("%s %s:%s ro=%t", gm.Type, gm.Source, gm.Target, gm.ReadOnly), fmt.Sprintf("%s %s:%s ro=%t", mt.Type, mt.Source, mt.Target, mt.ReadOnly))
		}
	}
	if !maps.Equal(gh.Tmpfs, hc.Tmpfs) {
		return diff("tmpfs", gh.Tmpfs, hc.Tmpfs)
	}
	return nil
}

// claimOne renames the oldest pool entry to the session's name, under the
// lock, and writes the session record; it returns the record and the pool
// container's name before the rename.
func (m *Manager) claimOne(ctx context.Context, cli *client.Client, p *plan, dir, owner string) (*record, string, error) {
	unlock, err := m.lock()
	if err != nil {
		return nil, "", err
	}
	defer unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", nil
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
				return nil, "", fmt.Errorf("%w: %s (task %q in %s); remove it first (vak session rm %s) or use another task name", ErrSessionExists, p.id, p.spec.Task, p.spec.Workspace, p.id)
			}
			if cerrdefs.IsNotFound(err) {
				os.Remove(slotFile)
				continue
			}
			return nil, "", engine.APIError("claim pool container", err)
		}
		os.Remove(slotFile)
		poolName := rec.Name
		rec.ID, rec.Name, rec.Owner, rec.Watched = p.id, name, owner, p.watched()
		rp, err := m.recordPath(p.id)
		if err != nil {
			return nil, "", err
		}
		if err := writeJSON(rp, &rec); err != nil {
			m.removeContainer(rec.Container, rec.RunDir, "")
			if rec.Docker {
				if key, kerr := rec.dockerSlot(); kerr == nil {
					m.removeSidecar(key)
				}
			}
			return nil, "", fmt.Errorf("session record: %w", err)
		}
		return &rec, poolName, nil
	}
	return nil, "", nil
}
