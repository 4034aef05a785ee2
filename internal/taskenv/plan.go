package taskenv

// The plan of a session: everything the broker decides before it creates
// a container (checked spec, pinned image, mounts, user, environment).

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/fsguard"
	"vak/internal/hostenv"
	"vak/internal/netpolicy"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/trace"
	"vak/internal/worker"
)

// plan is a validated spec and everything the broker decided from it,
// except what differs per container (name, socket directory, times).
type plan struct {
	spec      Spec
	id        string
	imageID   string
	imageEnv  []string
	worker    string
	user      docker.User
	limits    sandbox.Limits
	env       []string // base environment of commands
	home      string
	mounts    []mount.Mount // workspace, protected, extra
	identity  []worker.MountIdentity
	policy    string // digest of network, mode, install
	install   bool
	protected []string
	net       *sandbox.NetworkAttachment // proxied sessions
	netDone   func()                     // lets go of net (Manager.ProxyNet)
	// dockerImage is the sidecar image's ID (pinDockerImage; --docker
	// plans that meet the warm pool).
	dockerImage string
	// runtime is the OCI runtime the container names (Manager.Runtime, or
	// engine.DefaultRuntime, never the daemon's default); attrIdentity
	// says its file system shows inode numbers of its own (gVisor), so the
	// worker identifies mounts by worker.FileAttrs.
	runtime      string
	attrIdentity bool
}

// prepare validates spec and decides the container's shape. A plan with a
// proxied network holds it until releaseNet.
func (m *Manager) prepare(ctx context.Context, cli *client.Client, spec Spec) (_ *plan, err error) {
	spec, err = checkSpec(spec)
	if err != nil {
		return nil, err
	}
	ws := spec.Workspace
	p := &plan{spec: spec, id: SessionID(spec.Task, ws), user: m.user(), install: m.AllowInstall}
	rt, err := m.sessionRuntime(ctx, cli, spec)
	if err != nil {
		return nil, err
	}
	p.runtime, p.attrIdentity = cmp.Or(m.Runtime, engine.DefaultRuntime), rt.GVisor()
	if spec.NetworkPolicy == sandbox.NetworkProxied {
		if m.ProxyNet == nil {
			return nil, fmt.Errorf("%w: %q needs the egress gateway: configure [network] rules in the user config", ErrNetworkPolicy, spec.NetworkPolicy)
		}
		end := trace.From(ctx).Begin("create: prepare: proxied network")
		p.net, p.netDone, err = m.ProxyNet(ctx, ws, spec.Docker)
		end()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNetworkUnavailable, err)
		}
		defer func() {
			if err != nil {
				p.releaseNet()
			}
		}()
	}
	p.limits = spec.Limits.WithDefaults()

	// Two daemon round trips, at once: the image and the other sessions
	// (whose workspaces the never-mounted list holds).
	img := spec.BaseImage
	if img == "" {
		img = docker.DefaultImage
	}
	type inspected struct {
		ii  client.ImageInspectResult
		err error
	}
	end := trace.From(ctx).Begin("create: prepare: image + sessions")
	imgCh := make(chan inspected, 1)
	go func() {
		ii, err := cli.ImageInspect(ctx, img)
		imgCh <- inspected{ii, err}
	}()
	others, err := m.otherWorkspaces(ctx, cli, ws)
	got := <-imgCh
	end()
	if err != nil {
		return nil, err
	}
	if err := m.planMounts(p, others); err != nil {
		return nil, err
	}
	if err := p.pinImage(img, got.ii, got.err); err != nil {
		return nil, err
	}
	if err := m.planWorker(p, got.ii.Architecture); err != nil {
		return nil, err
	}
	if err := m.planEnv(p); err != nil {
		return nil, err
	}
	p.policy = policyDigest(spec.NetworkPolicy, spec.Mode, p.install, p.user)
	if m.mutatePlan != nil {
		m.mutatePlan(p)
	}
	return p, nil
}

// releaseNet lets go of the plan's proxied network (see Manager.ProxyNet).
func (p *plan) releaseNet() {
	if p.netDone != nil {
		p.netDone()
	}
}

// badSpec is an ErrInvalidSpec error.
func badSpec(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
}

// checkSpec validates what a caller asked for and fills its defaults.
func checkSpec(spec Spec) (Spec, error) {
	bad := badSpec
	if spec.Task == "" {
		spec.Task = DefaultTask
	}
	if !validTask(spec.Task) {
		return spec, bad("task %q must match %s", spec.Task, taskPattern)
	}
	switch spec.Mode {
	case 0:
		spec.Mode = sandbox.WorkspaceWrite
	case sandbox.ReadOnly, sandbox.WorkspaceWrite:
	default:
		return spec, bad("mode %v: a session is a sandbox; only %s and %s are possible", spec.Mode, sandbox.ReadOnly, sandbox.WorkspaceWrite)
	}
	var err error
	if spec.NetworkPolicy, err = netpolicy.Parse(string(spec.NetworkPolicy)); err != nil {
		return spec, fmt.Errorf("%w: %w", ErrNetworkPolicy, err)
	}
	if spec.Docker && spec.NetworkPolicy != sandbox.NetworkProxied {
		return spec, bad("nested Docker (--docker) needs --network %s (inner containers' traffic must go through the gateway); the network is %q", sandbox.NetworkProxied, spec.NetworkPolicy)
	}
	ws := spec.Workspace
	if !filepath.IsAbs(ws) || filepath.Clean(ws) != ws || ws == "/" {
		return spec, bad("workspace %q must be a canonical absolute path", ws)
	}
	if real, err := filepath.EvalSymlinks(ws); err != nil || real != ws {
		return spec, bad("workspace %q is not canonical (it resolves to %q: %v)", ws, real, err)
	}
	if strings.ContainsAny(ws, "\x00\n") || paths.Within(ContainerVakDir, ws) {
		return spec, bad("workspace %q cannot be mounted", ws)
	}
	return spec, nil
}

// planMounts decides the bind mounts: the workspace at its own path, its
// existing protected paths read-only, and the extra read-only mounts, each
// checked against the never-mounted list (credentials, sockets, vak's
// state, other sessions' workspaces; the workspace itself must pass it too).
func (m *Manager) planMounts(p *plan, others []string) error {
	spec, ws, bad := p.spec, p.spec.Workspace, badSpec
	home := m.UserHome
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	never := neverMount(home, others)
	if m.StateDir != "" {
		never = append(never, protectedPath{m.StateDir, "vak's own state"})
		if r, err := filepath.EvalSymlinks(m.StateDir); err == nil {
			never = append(never, protectedPath{r, "vak's own state"})
		}
	}
	if _, err := checkMount(ws, never); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	addBind := func(src string, ro bool) error {
		id, err := worker.LstatIdentity(src, p.attrIdentity)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidSpec, src, err)
		}
		p.mounts = append(p.mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: src, ReadOnly: ro,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
		p.identity = append(p.identity, id)
		return nil
	}
	if err := addBind(ws, spec.Mode == sandbox.ReadOnly); err != nil {
		return err
	}
	// Existing .git entries and parents of protected paths are pinned (bound
	// onto themselves read-write: a mount point cannot be renamed or
	// replaced), existing protected paths and gitdir files mounted
	// read-only, nested repositories included (fsguard.Plan). The plan is
	// made without following links (a symlink would make the daemon mount
	// its target). The worker checks each mount's identity before it serves
	// anything, so a path swapped for a symlink between the plan and the
	// mount is caught.
	for _, rel := range spec.Protected {
		p.protected = append(p.protected, rel)
		if full := filepath.Join(ws, rel); !paths.Within(ws, full) || full == ws {
			return bad("protected path %q is not inside the workspace", rel)
		}
	}
	if spec.Mode == sandbox.WorkspaceWrite {
		prot, err := fsguard.PlanProtection(ws, spec.Protected)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
		for _, dir := range prot.Pin {
			if err := addBind(dir, false); err != nil {
				return err
			}
		}
		for _, path := range prot.ReadOnly {
			if err := addBind(path, true); err != nil {
				return err
			}
		}
	}
	for _, mp := range spec.Mounts {
		real, err := checkMount(mp, never)
		if err != nil {
			return err
		}
		if paths.Within(ws, real) || paths.Within(real, ws) {
			return fmt.Errorf("%w %q: it overlaps the workspace %s", ErrForbiddenMount, mp, ws)
		}
		if err := addBind(real, true); err != nil {
			return err
		}
	}
	return nil
}

// pinImage pins the session to the image's ID and keeps its environment
// (less vak's own variables).
func (p *plan) pinImage(img string, ii client.ImageInspectResult, err error) error {
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: image %q is not present locally (sessions never pull: build or pull it first)", ErrInvalidSpec, img)
		}
		return engine.APIError("inspect image "+img, err)
	}
	p.imageID = ii.ID
	if ii.Config != nil {
		for _, kv := range ii.Config.Env {
			if !strings.HasPrefix(kv, "VAK_") {
				p.imageEnv = append(p.imageEnv, kv)
			}
		}
	}
	return nil
}

// planWorker finds the worker binary and checks that it can run in an
// image of architecture arch as the session's user.
func (m *Manager) planWorker(p *plan, arch string) error {
	var err error
	p.worker = m.Worker
	if p.worker == "" {
		if p.worker, err = os.Executable(); err != nil {
			return fmt.Errorf("%w: find vak binary: %v", ErrWorkerBinary, err)
		}
	}
	if p.worker, err = filepath.EvalSymlinks(p.worker); err != nil {
		return fmt.Errorf("%w: %w", ErrWorkerBinary, err)
	}
	return m.checkWorker(p.worker, arch, p.user)
}

// planEnv decides the environment of commands: the image's, then the
// allowed host variables, then what vak controls (PATH if unset, HOME,
// TMPDIR).
func (m *Manager) planEnv(p *plan) error {
	spec, bad := p.spec, badSpec
	allow := m.EnvAllowlist
	if allow == nil {
		allow = hostenv.Allowlist()
	}
	env := slices.Clone(p.imageEnv)
	for _, kv := range spec.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return bad("environment entry %q is not KEY=VALUE", kv)
		}
		if !slices.Contains(allow, k) {
			return fmt.Errorf("%w: %s (allowed: %s; configure more with sandbox.env)", ErrEnvNotAllowed, k, strings.Join(allow, ", "))
		}
		env = hostenv.Set(env, kv)
	}
	p.home = SessionHome
	if spec.Mode == sandbox.ReadOnly {
		p.home = docker.ContainerHome
	}
	env = hostenv.WithDefaultPath(env)
	env = hostenv.Set(env, "HOME="+p.home)
	env = hostenv.Set(env, "TMPDIR=/tmp")
	p.env = withNetworkEnv(env, p.net)
	if spec.Docker {
		p.env = hostenv.Set(p.env, "DOCKER_HOST=unix://"+ContainerDockerSocket)
	}
	return nil
}

// policyDigest names the policy a session runs under; it is part of the
// snapshot key's policy generation.
func policyDigest(n sandbox.NetworkPolicy, mode sandbox.Mode, install bool, u docker.User) string {
	h := sha256.Sum256(fmt.Appendf(nil, "network=%s\nmode=%s\ninstall=%t\nroot=%t\n", n, mode, install, u.Root))
	return hex.EncodeToString(h[:8])
}

// checkWorker checks the worker binary once per path and architecture.
func (m *Manager) checkWorker(path, arch string, u docker.User) error {
	key := path + "\x00" + arch + "\x00" + u.Spec()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.workers == nil {
		m.workers = map[string]error{}
	}
	err, ok := m.workers[key]
	if !ok {
		err = engine.CheckWorkerBinary(path, arch)
		if err == nil {
			uid, gid := u.IDs()
			err = engine.CheckRunnableBy(path, uid, gid)
		}
		m.workers[key] = err
	}
	return err
}

// otherWorkspaces lists the workspaces of this user's other sessions.
func (m *Manager) otherWorkspaces(ctx context.Context, cli *client.Client, ws string) ([]string, error) {
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).
		Add("label", engine.LabelManaged+"=true", engine.LabelKind+"="+KindSession)})
	if err != nil {
		return nil, engine.APIError("list sessions", err)
	}
	var out []string
	for _, c := range res.Items {
		if w := c.Labels[engine.LabelWorkspace]; w != "" && w != ws && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out, nil
}
