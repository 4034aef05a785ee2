package docker

// Session-scoped task environments (seed 000, "Task environments").
//
// A session is one long-lived container per (task, workspace), created for
// the first turn of an agent's session, reused by later turns and destroyed
// (or snapshotted into an immutable image) when the session is released. It
// is driven through the Engine API, never the docker CLI, and its commands
// run through vak's own worker, which is the container's entrypoint:
//
//	Create ──> container "vak-session-TASK-HASH"
//	             PID 1: /.vak/bin/vak __worker --container   (vak, bind-mounted read-only)
//	             ├─ protocol on the attached stdio            (the broker that created it)
//	             └─ protocol on /.vak/run/worker.sock          (= STATE/sessions/run/SLOT on the host)
//	Exec   ──> one protocol request; the worker forks `sh -c` under the reap shim
//	Snapshot─> docker commit, tagged vak-env:KEY (KEY = hash of base, manifest, policy)
//	Discard──> docker rm -f, run directory and record removed
//
// The broker decides everything about the container: its name (from task
// and workspace), its mounts (the canonical workspace at its own path, the
// worker binary and the per-session socket directory; never a Docker socket,
// host credentials, vak's config or state, or another workspace), the image
// (a tag is resolved to the image ID at create time and the session is
// pinned to that ID), limits, network policy and lifetime.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/shellquote"
	"vak/internal/worker"
)

// Paths inside a session container.
const (
	// ContainerVakDir holds what vak mounts into a session; no workspace or
	// extra mount may be at or below it.
	ContainerVakDir = "/.vak"
	// ContainerWorker is the worker binary (the broker's own vak, read-only).
	ContainerWorker = ContainerVakDir + "/bin/vak"
	// ContainerRunDir is the per-session directory holding the worker socket.
	ContainerRunDir = ContainerVakDir + "/run"
	// SessionHome is HOME in workspace-write sessions: in the writable root
	// layer, owned by the session's user, so user-level installs (pip
	// --user, npm prefixes, go install) persist for the session and are part
	// of its snapshots. Read-only sessions use ContainerHome (/tmp).
	SessionHome = "/home/vak"
	socketName  = "worker.sock"
)

// Container names.
const (
	SessionPrefix = "vak-session-" // a session: SessionPrefix + session ID
	PoolPrefix    = "vak-pool-"    // a warm-pool container not yet claimed
)

// Session labels (besides LabelManaged, LabelKind and LabelWorkspace).
const (
	KindSession    = "session"
	LabelOwner     = "vak.owner"     // host uid of the user who created it
	LabelOwnerProc = "vak.owner.pid" // "BOOTID/PID/START" of the owning process, if any
	LabelSession   = "vak.session"   // session ID ("" for a pool container: its name says)
	LabelTask      = "vak.task"      // the task name
	LabelCreated   = "vak.created"   // creation time, unix seconds
	LabelImage     = "vak.image"     // the pinned image ID
	LabelLifetime  = "vak.lifetime"  // maximum lifetime, seconds
	LabelIdle      = "vak.idle"      // idle timeout, seconds
	LabelPolicy    = "vak.policy"    // digest of the session's policy (network, mode, install)
	LabelInstall   = "vak.install"   // "true" when root package installs are allowed
	LabelPool      = "vak.pool"      // pool key of a container created for the warm pool
)

// Defaults.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultMaxLifetime = 24 * time.Hour
	// DefaultTask names a session when the caller gives no task.
	DefaultTask = "default"
)

// Errors of the session API.
var (
	// ErrUnsupported reports a session feature this host cannot provide.
	ErrUnsupported = errors.New("unsupported on this host")
	// ErrNoSession reports an unknown session ID.
	ErrNoSession = errors.New("no such session")
	// ErrSessionExists reports a session for the same task and workspace.
	ErrSessionExists = errors.New("session already exists")
	// ErrSessionEnded reports a session whose worker is gone (it died, was
	// killed, or hit its idle timeout or lifetime); the message says which.
	ErrSessionEnded = errors.New("session ended")
	// ErrUntrustedPeer reports that the session socket is not served by the
	// session's worker (it was replaced from inside the container).
	ErrUntrustedPeer = errors.New("session socket is not the session's worker")
	// ErrInvalidSpec reports a session spec the broker refuses.
	ErrInvalidSpec = errors.New("invalid session spec")
	// ErrEnvNotAllowed reports a Spec.Env variable outside the allowlist.
	ErrEnvNotAllowed = errors.New("environment variable not allowed into sessions")
	// ErrNetworkPolicy reports a network policy that is not implemented.
	ErrNetworkPolicy = errors.New("network policy not available")
	// ErrInstallNotAllowed reports a root exec in a session created without
	// package installs allowed.
	ErrInstallNotAllowed = errors.New("package installs are not allowed in this session")
)

// NetworkPolicy says what network a session has. Unknown policies are
// refused (fail closed), never weakened.
type NetworkPolicy string

const (
	// NetworkNone: no network at all (--network none). The default.
	NetworkNone NetworkPolicy = "none"
	// NetworkProxied: the session joins its workspace's proxied network,
	// whose only way out is vak's egress gateway (Manager.ProxyNet).
	NetworkProxied NetworkPolicy = "proxied"
)

// ParseNetworkPolicy parses a policy name; "" means NetworkNone.
func ParseNetworkPolicy(s string) (NetworkPolicy, error) {
	p := NetworkPolicy(s)
	if p == "" {
		p = NetworkNone
	}
	return p, p.check()
}

func (p NetworkPolicy) check() error {
	switch p {
	case NetworkNone, NetworkProxied:
		return nil
	}
	return fmt.Errorf("%w: unknown policy %q (want %q or %q)", ErrNetworkPolicy, p, NetworkNone, NetworkProxied)
}

// Spec is what a caller asks for. The broker validates all of it and
// decides the rest.
type Spec struct {
	// Task names the session within its workspace ([A-Za-z0-9][A-Za-z0-9_.-]*,
	// at most 40 characters); empty means DefaultTask.
	Task string
	// Workspace is the canonical absolute workspace path; it is mounted at
	// the same path, read-only in ReadOnly mode.
	Workspace string
	// BaseImage is an image reference (tag or ID); it is resolved to its
	// image ID now and the session is pinned to that ID. Empty means
	// DefaultImage.
	BaseImage string
	// Limits bound the container; zero fields are sandbox defaults.
	Limits sandbox.Limits
	// NetworkPolicy; empty means NetworkNone.
	NetworkPolicy NetworkPolicy
	// Mode is ReadOnly or WorkspaceWrite (zero means WorkspaceWrite).
	// ReadOnly also makes the root filesystem read-only.
	Mode sandbox.Mode
	// Env is the base environment of commands (KEY=VALUE). Every name must
	// be in the manager's allowlist; the image's own environment comes first.
	Env []string
	// Mounts are extra host paths mounted read-only at the same path. Each
	// is checked against the never-mounted list (with symlinks and ".."
	// resolved); a refusal is an error, never a silent omission.
	Mounts []string
	// Protected are workspace-relative paths that stay read-only (existing
	// ones are mounted read-only; the worker removes ones a command creates).
	Protected []string
	// DefaultTimeout applies to commands that set none.
	DefaultTimeout time.Duration
	// OwnerPID, if set, is the process that owns the session: once it is
	// gone, GC removes the session. Zero means a detached session, which
	// ends by idle timeout, lifetime or Discard.
	OwnerPID int
}

// Info describes a session container.
type Info struct {
	ID        string // session ID ("" for an unclaimed pool container)
	Container string // container ID
	Name      string // container name
	Task      string
	Workspace string
	Image     string // pinned image ID
	Created   time.Time
	State     string // running, exited, ...
	Status    string // docker's human status
	Pool      string // pool key, for containers created for the pool
	Labels    map[string]string
}

// Command is one command to run in a session. It reaches the container only
// as argv, joined by the quoting layer into the `sh -c` line the worker runs.
type Command struct {
	Argv []string
	// Dir is the working directory, absolute inside the workspace or
	// relative to it; empty means the workspace root.
	Dir string
	// Env adds variables (names [A-Za-z_][A-Za-z0-9_]*, not HOME, TMPDIR,
	// PWD or VAK_*).
	Env map[string]string
	// Timeout kills the command's process tree; zero means the session's
	// default.
	Timeout time.Duration
	// Stdin is the command's standard input; nil means /dev/null.
	Stdin []byte
	// MaxOutputBytes bounds stdout and stderr each; zero means the
	// protocol's default (1 MiB).
	MaxOutputBytes int64
	// Output, if set, streams output as it arrives; the result then carries
	// none.
	Output func(stream string, data []byte)
}

// Result is a command's outcome.
type Result = worker.BashResult

// DefaultSessionEnv are the host variables a session may receive (its
// base environment); configuration can name more (sandbox.env).
var DefaultSessionEnv = []string{"LANG", "LANGUAGE", "LC_ALL", "TERM", "TZ", "COLORTERM", "NO_COLOR"}

// HostEnv returns KEY=VALUE for each name that is set in the host
// environment: the broker builds Spec.Env with it from the allowlist.
func HostEnv(names []string) []string {
	var env []string
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, n+"=") }) {
			env = append(env, n+"="+v)
		}
	}
	return env
}

// Manager creates and drives sessions. Its zero value works (with the
// defaults named on each field); set fields before first use.
type Manager struct {
	// API is the Engine API client; nil means NewEngine on first use.
	API *client.Client
	// StateDir is vak's state directory (session records and per-session
	// socket directories); empty means paths.EnsureStateDir.
	StateDir string
	// Worker is the static Linux vak binary that is every session's
	// entrypoint; empty means this executable.
	Worker string
	// User is the identity inside; zero means the invoking uid:gid.
	User User
	// Labels are added to every container and image the manager creates,
	// and restrict List and GC to objects that carry them (tests: vak.test=1).
	Labels map[string]string
	// IdleTimeout and MaxLifetime bound every session; zero means
	// DefaultIdleTimeout and DefaultMaxLifetime.
	IdleTimeout, MaxLifetime time.Duration
	// AllowInstall gives sessions the capabilities package managers need as
	// root and allows root commands through `docker exec -u 0`
	// (InteractiveArgs with root). Commands sent through the worker always
	// run as the session's unprivileged user.
	AllowInstall bool
	// EnvAllowlist names the variables Spec.Env may carry; nil means
	// DefaultSessionEnv.
	EnvAllowlist []string
	// PolicyGeneration is the operator's policy generation, hashed into
	// snapshot keys (bump it to invalidate every snapshot); empty means "1".
	PolicyGeneration string
	// PoolSize is how many started containers FillPool keeps ready per pool
	// key; zero disables the pool (Create then never claims).
	PoolSize int
	// Home is the home directory whose credentials are never mounted; empty
	// means the invoking user's.
	Home string
	// Binary is the docker CLI used only for interactive TTY execs; empty
	// means "docker".
	Binary string
	// ProxyNet gives sessions with NetworkPolicy proxied their network (the
	// CLI wires the workspace's egress topology here). Nil refuses proxied
	// sessions.
	ProxyNet func(ctx context.Context, workspace string) (*sandbox.NetworkAttachment, error)
	// ReleaseProxyNet is called when a session is discarded, so a
	// workspace's topology goes when its last user does. May be nil.
	ReleaseProxyNet func(ctx context.Context, workspace string)

	mu        sync.Mutex
	open      map[string]*Session
	engineErr error
	workers   map[string]error // worker binary checks, per path and arch

	// mutatePlan, if set, changes a validated plan (tests: simulate a
	// mount swapped between check and mount).
	mutatePlan func(*plan)
}

// NewEngine returns an Engine API client configured from the environment
// (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, DOCKER_API_VERSION).
// It negotiates the API version with the daemon on its first request.
func NewEngine() (*client.Client, error) {
	return client.New(client.FromEnv)
}

func (m *Manager) engine() (*client.Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.API == nil && m.engineErr == nil {
		m.API, m.engineErr = NewEngine()
	}
	if m.engineErr != nil {
		return nil, fmt.Errorf("%w: %v", ErrDaemonUnavailable, m.engineErr)
	}
	return m.API, nil
}

// apiErr marks an unreachable daemon with ErrDaemonUnavailable.
func apiErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if client.IsErrConnectionFailed(err) {
		return fmt.Errorf("%s: %w: %v", what, ErrDaemonUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (m *Manager) user() User {
	if m.User == (User{}) {
		return User{UID: os.Getuid(), GID: os.Getgid()}
	}
	return m.User
}

func (u User) spec() string {
	if u.Root {
		return "0:0"
	}
	return strconv.Itoa(u.UID) + ":" + strconv.Itoa(u.GID)
}

func (u User) ids() (int, int) {
	if u.Root {
		return 0, 0
	}
	return u.UID, u.GID
}

func (m *Manager) idle() time.Duration {
	if m.IdleTimeout > 0 {
		return m.IdleTimeout
	}
	return DefaultIdleTimeout
}

func (m *Manager) lifetime() time.Duration {
	if m.MaxLifetime > 0 {
		return m.MaxLifetime
	}
	return DefaultMaxLifetime
}

func (m *Manager) stateDir() (string, error) {
	d := m.StateDir
	if d == "" {
		var err error
		if d, err = paths.EnsureStateDir(); err != nil {
			return "", err
		}
	}
	s := filepath.Join(d, "sessions")
	for _, dir := range []string{s, filepath.Join(s, "run"), filepath.Join(s, "pool")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("session state: %w", err)
		}
	}
	return s, nil
}

var taskRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$`)

// idRe matches session IDs (task-HASH); it keeps IDs safe as file names.
var idRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}-[0-9a-f]{10}$`)

// SessionID is the ID of the session for task in workspace: the task and a
// hash of both, so one workspace's tasks and one task's workspaces differ.
func SessionID(task, workspace string) string {
	h := sha256.Sum256([]byte(task + "\x00" + workspace))
	return task + "-" + hex.EncodeToString(h[:5])
}

// ValidID reports whether id has the shape of a session ID.
func ValidID(id string) bool { return idRe.MatchString(id) }

// plan is a validated spec and everything the broker decided from it,
// except what differs per container (name, socket directory, times).
type plan struct {
	spec      Spec
	id        string
	imageID   string
	imageEnv  []string
	worker    string
	user      User
	limits    sandbox.Limits
	env       []string // base environment of commands
	home      string
	mounts    []mount.Mount // workspace, protected, extra
	identity  []worker.MountIdentity
	policy    string // digest of network, mode, install
	install   bool
	protected []string
	net       *sandbox.NetworkAttachment // proxied sessions
}

// prepare validates spec and decides the container's shape.
func (m *Manager) prepare(ctx context.Context, cli *client.Client, spec Spec) (*plan, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, a...))
	}
	if spec.Task == "" {
		spec.Task = DefaultTask
	}
	if !taskRe.MatchString(spec.Task) {
		return nil, bad("task %q must match %s", spec.Task, taskRe)
	}
	switch spec.Mode {
	case 0:
		spec.Mode = sandbox.WorkspaceWrite
	case sandbox.ReadOnly, sandbox.WorkspaceWrite:
	default:
		return nil, bad("mode %v: a session is a sandbox; only %s and %s are possible", spec.Mode, sandbox.ReadOnly, sandbox.WorkspaceWrite)
	}
	var err error
	if spec.NetworkPolicy, err = ParseNetworkPolicy(string(spec.NetworkPolicy)); err != nil {
		return nil, err
	}
	ws := spec.Workspace
	if !filepath.IsAbs(ws) || filepath.Clean(ws) != ws || ws == "/" {
		return nil, bad("workspace %q must be a canonical absolute path", ws)
	}
	if real, err := filepath.EvalSymlinks(ws); err != nil || real != ws {
		return nil, bad("workspace %q is not canonical (it resolves to %q: %v)", ws, real, err)
	}
	if strings.ContainsAny(ws, "\x00\n") || paths.Within(ContainerVakDir, ws) {
		return nil, bad("workspace %q cannot be mounted", ws)
	}
	p := &plan{spec: spec, id: SessionID(spec.Task, ws), user: m.user(), install: m.AllowInstall}
	if spec.NetworkPolicy == NetworkProxied {
		if m.ProxyNet == nil {
			return nil, fmt.Errorf("%w: %q needs the egress gateway: configure [network] rules in the user config", ErrNetworkPolicy, spec.NetworkPolicy)
		}
		if p.net, err = m.ProxyNet(ctx, ws); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNetworkPolicy, err)
		}
	}
	p.limits = spec.Limits.WithDefaults()

	// The never-mounted list: the workspace itself must pass it too (it
	// must not be or contain credentials, sockets, vak's state or another
	// session's workspace).
	// Two daemon round trips, at once: the image and the other sessions.
	img := spec.BaseImage
	if img == "" {
		img = DefaultImage
	}
	type inspected struct {
		ii  client.ImageInspectResult
		err error
	}
	imgCh := make(chan inspected, 1)
	go func() {
		ii, err := cli.ImageInspect(ctx, img)
		imgCh <- inspected{ii, err}
	}()
	others, err := m.otherWorkspaces(ctx, cli, ws)
	got := <-imgCh
	if err != nil {
		return nil, err
	}
	home := m.Home
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
		return nil, fmt.Errorf("workspace: %w", err)
	}
	addBind := func(src string, ro bool) error {
		var st syscall.Stat_t
		if err := syscall.Lstat(src, &st); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalidSpec, src, err)
		}
		p.mounts = append(p.mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: src, ReadOnly: ro,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
		p.identity = append(p.identity, worker.MountIdentity{Path: src, Dev: uint64(st.Dev), Ino: uint64(st.Ino)})
		return nil
	}
	if err := addBind(ws, spec.Mode == sandbox.ReadOnly); err != nil {
		return nil, err
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
			return nil, bad("protected path %q is not inside the workspace", rel)
		}
	}
	if spec.Mode == sandbox.WorkspaceWrite {
		plan, err := protectionPlan(ws, spec.Protected)
		if err != nil {
			return nil, err
		}
		for _, rel := range plan.Pin {
			if err := addBind(filepath.Join(ws, rel), false); err != nil {
				return nil, err
			}
		}
		for _, rel := range plan.ReadOnly {
			if err := addBind(filepath.Join(ws, rel), true); err != nil {
				return nil, err
			}
		}
	}
	for _, mp := range spec.Mounts {
		real, err := checkMount(mp, never)
		if err != nil {
			return nil, err
		}
		if paths.Within(ws, real) || paths.Within(real, ws) {
			return nil, fmt.Errorf("%w %q: it overlaps the workspace %s", ErrForbiddenMount, mp, ws)
		}
		if err := addBind(real, true); err != nil {
			return nil, err
		}
	}

	// Pin the image.
	ii, err := got.ii, got.err
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: image %q is not present locally (sessions never pull: build or pull it first)", ErrInvalidSpec, img)
		}
		return nil, apiErr("inspect image "+img, err)
	}
	p.imageID = ii.ID
	if ii.Config != nil {
		for _, kv := range ii.Config.Env {
			if !strings.HasPrefix(kv, "VAK_") {
				p.imageEnv = append(p.imageEnv, kv)
			}
		}
	}

	// The worker binary.
	p.worker = m.Worker
	if p.worker == "" {
		if p.worker, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("%w: find vak binary: %v", ErrWorkerBinary, err)
		}
	}
	if p.worker, err = filepath.EvalSymlinks(p.worker); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrWorkerBinary, err)
	}
	if err := m.checkWorker(p.worker, ii.Architecture, p.user); err != nil {
		return nil, err
	}

	// The environment: the image's, then the allowed host variables, then
	// what vak controls.
	allow := m.EnvAllowlist
	if allow == nil {
		allow = DefaultSessionEnv
	}
	env := slices.Clone(p.imageEnv)
	for _, kv := range spec.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, bad("environment entry %q is not KEY=VALUE", kv)
		}
		if !slices.Contains(allow, k) {
			return nil, fmt.Errorf("%w: %s (allowed: %s; configure more with sandbox.env)", ErrEnvNotAllowed, k, strings.Join(allow, ", "))
		}
		env = setEnv(env, kv)
	}
	p.home = SessionHome
	if spec.Mode == sandbox.ReadOnly {
		p.home = ContainerHome
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		env = append(env, "PATH="+defaultPath)
	}
	env = setEnv(env, "HOME="+p.home)
	env = setEnv(env, "TMPDIR=/tmp")
	p.env = withNetworkEnv(env, p.net)
	p.policy = policyDigest(spec.NetworkPolicy, spec.Mode, p.install, p.user)
	if m.mutatePlan != nil {
		m.mutatePlan(p)
	}
	return p, nil
}

// defaultPath is PATH when the image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func setEnv(env []string, kv string) []string {
	k, _, _ := strings.Cut(kv, "=")
	env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") })
	return append(env, kv)
}

// policyDigest names the policy a session runs under; it is part of the
// snapshot key's policy generation.
func policyDigest(n NetworkPolicy, mode sandbox.Mode, install bool, u User) string {
	h := sha256.Sum256(fmt.Appendf(nil, "network=%s\nmode=%s\ninstall=%t\nroot=%t\n", n, mode, install, u.Root))
	return hex.EncodeToString(h[:8])
}

// checkWorker checks the worker binary once per path and architecture.
func (m *Manager) checkWorker(path, arch string, u User) error {
	key := path + "\x00" + arch + "\x00" + u.spec()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.workers == nil {
		m.workers = map[string]error{}
	}
	err, ok := m.workers[key]
	if !ok {
		err = CheckWorkerBinary(path, arch)
		if err == nil {
			uid, gid := u.ids()
			err = checkRunnableBy(path, uid, gid)
		}
		m.workers[key] = err
	}
	return err
}

// otherWorkspaces lists the workspaces of this user's other sessions.
func (m *Manager) otherWorkspaces(ctx context.Context, cli *client.Client, ws string) ([]string, error) {
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).
		Add("label", LabelManaged+"=true", LabelKind+"="+KindSession)})
	if err != nil {
		return nil, apiErr("list sessions", err)
	}
	var out []string
	for _, c := range res.Items {
		if w := c.Labels[LabelWorkspace]; w != "" && w != ws && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out, nil
}

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
	Home      string    `json:"home"`
	Env       []string  `json:"env"`
	Owner     string    `json:"owner,omitempty"`
	Install   bool      `json:"install,omitempty"`
	Created   time.Time `json:"created"`
	Pool      string    `json:"pool,omitempty"`
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
		return nil, apiErr("inspect session "+id, err)
	}
	c := res.Container
	if c.Config == nil || c.Config.Labels[LabelManaged] != "true" || c.Config.Labels[LabelKind] != KindSession {
		return nil, fmt.Errorf("%w: %s (the container of that name is not a vak session)", ErrNoSession, id)
	}
	r := &record{ID: id, Container: c.ID, Name: SessionPrefix + id, Workspace: c.Config.Labels[LabelWorkspace],
		Image: c.Config.Labels[LabelImage], User: c.Config.User, Owner: c.Config.Labels[LabelOwnerProc],
		Install: c.Config.Labels[LabelInstall] == "true", Pool: c.Config.Labels[LabelPool]}
	for _, mp := range c.Mounts {
		if mp.Destination == ContainerRunDir {
			r.RunDir = mp.Source
		}
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
			r.Home = h
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
	uid, gid := m.user().ids()
	if uid != os.Getuid() || gid != os.Getgid() {
		if err := os.Chown(dir, uid, gid); err != nil {
			os.Remove(dir)
			return "", fmt.Errorf("session socket directory: the session's user %d:%d must own it: %w", uid, gid, err)
		}
	}
	return dir, nil
}

// containerConfig builds the create request for p. name is the container
// name, session the session ID ("" for a pool container), runDir its socket
// directory.
func (m *Manager) containerConfig(p *plan, session, runDir, pool string, created time.Time) (*container.Config, *container.HostConfig, error) {
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
		LabelManaged:   "true",
		LabelKind:      KindSession,
		LabelOwner:     strconv.Itoa(os.Getuid()),
		LabelSession:   session,
		LabelTask:      p.spec.Task,
		LabelCreated:   strconv.FormatInt(created.Unix(), 10),
		LabelWorkspace: p.spec.Workspace,
		LabelImage:     p.imageID,
		LabelLifetime:  strconv.FormatInt(int64(m.lifetime()/time.Second), 10),
		LabelIdle:      strconv.FormatInt(int64(m.idle()/time.Second), 10),
		LabelPolicy:    p.policy,
	}
	if pool != "" {
		labels[LabelPool] = pool
		labels[LabelTask] = ""
	}
	if p.install {
		labels[LabelInstall] = "true"
	}
	if p.spec.OwnerPID > 0 && pool == "" {
		tok, err := ownerToken(p.spec.OwnerPID)
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
		User:         p.user.spec(),
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
	if prof, err := SeccompProfile(); err == nil {
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
func homeArchive(u User) []byte {
	uid, gid := u.ids()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(SessionHome, "/") + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: time.Unix(0, 0), Uid: uid, Gid: gid})
	tw.Close()
	return b.Bytes()
}

// Create makes a session: it validates spec, pins its image, and either
// claims a warm-pool container (when PoolSize > 0 and one matches) or
// creates, starts and attaches a new container, then waits for the worker.
// A session for the same task and workspace is ErrSessionExists.
func (m *Manager) Create(ctx context.Context, spec Spec) (*Session, error) {
	cli, err := m.engine()
	if err != nil {
		return nil, err
	}
	p, err := m.prepare(ctx, cli, spec)
	if err != nil {
		return nil, err
	}
	if m.PoolSize > 0 {
		s, err := m.claim(ctx, cli, p)
		if s != nil || err != nil {
			return s, err
		}
	}
	return m.createDirect(ctx, cli, p)
}

func (m *Manager) createDirect(ctx context.Context, cli *client.Client, p *plan) (_ *Session, err error) {
	slot := randomHex(8)
	runDir, err := m.makeRunDir(slot)
	if err != nil {
		return nil, err
	}
	created := time.Now().Truncate(time.Second)
	cfg, hc, err := m.containerConfig(p, p.id, runDir, "", created)
	if err != nil {
		os.RemoveAll(runDir)
		return nil, err
	}
	name := SessionPrefix + p.id
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hc, Name: name})
	if err != nil {
		os.RemoveAll(runDir)
		if cerrdefs.IsConflict(err) {
			return nil, fmt.Errorf("%w: %s (task %q in %s); remove it first (vak session rm %s) or use another task name", ErrSessionExists, p.id, p.spec.Task, p.spec.Workspace, p.id)
		}
		return nil, apiErr("create session container", err)
	}
	cid := res.ID
	var att *attachment
	defer func() {
		if err != nil {
			if att != nil {
				att.Close()
			}
			m.removeContainer(cid, runDir, "")
		}
	}()
	if p.spec.Mode == sandbox.WorkspaceWrite {
		if _, err = cli.CopyToContainer(ctx, cid, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(homeArchive(p.user))}); err != nil {
			return nil, apiErr("create the session's home", err)
		}
	}
	if att, err = attach(ctx, cli, cid); err != nil {
		return nil, err
	}
	if _, err = cli.ContainerStart(ctx, cid, client.ContainerStartOptions{}); err != nil {
		return nil, apiErr("start session container", err)
	}
	wc := worker.NewClient(att, att.stdout)
	if err = wc.WaitReady(ctx); err != nil {
		return nil, m.startErr(cid, att.stderr.String(), err)
	}
	rec := &record{ID: p.id, Container: cid, Name: name, RunDir: runDir, Workspace: p.spec.Workspace, Image: p.imageID,
		User: p.user.spec(), Home: p.home, Env: p.env, Owner: cfg.Labels[LabelOwnerProc], Install: p.install, Created: created}
	rp, err := m.recordPath(p.id)
	if err != nil {
		return nil, err
	}
	if err = writeJSON(rp, rec); err != nil {
		return nil, fmt.Errorf("session record: %w", err)
	}
	s := &Session{m: m, rec: rec, client: wc, conn: att, stderr: att.stderr}
	m.remember(s)
	return s, nil
}

// startErr explains why a new container's worker did not become ready.
func (m *Manager) startErr(cid, stderr string, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		msg = m.logTail(ctx, cid)
	}
	if msg != "" {
		return fmt.Errorf("session worker did not start: %w: %s", cause, msg)
	}
	return fmt.Errorf("session worker did not start: %w", cause)
}

// logTail returns the last lines the worker wrote to stderr.
func (m *Manager) logTail(ctx context.Context, cid string) string {
	cli, err := m.engine()
	if err != nil {
		return ""
	}
	rc, err := cli.ContainerLogs(ctx, cid, client.ContainerLogsOptions{ShowStderr: true, Tail: "20"})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var errb bytes.Buffer
	stdcopy.StdCopy(io.Discard, &errb, io.LimitReader(rc, 64<<10))
	return strings.TrimSpace(errb.String())
}

// removeContainer force-removes a container (and its anonymous volumes),
// its socket directory and its record, best effort.
func (m *Manager) removeContainer(cid, runDir, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	if cli, e := m.engine(); e == nil {
		_, err = cli.ContainerRemove(ctx, cid, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && cerrdefs.IsNotFound(err) {
			err = nil
		}
		err = apiErr("remove session container", err)
	} else {
		err = e
	}
	if runDir != "" && err == nil {
		os.RemoveAll(runDir)
	}
	if id != "" && err == nil {
		if p, e := m.recordPath(id); e == nil {
			os.Remove(p)
		}
	}
	return err
}

// Open reattaches to a running session by ID (after a broker restart, or
// from another process) through its worker socket: no daemon round trip
// when the host record exists. The caller Closes the returned session.
func (m *Manager) Open(ctx context.Context, id string) (*Session, error) {
	rec, err := m.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = m.recordFromDaemon(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	conn, err := dialWorker(ctx, rec.RunDir, rec.Container)
	if err != nil {
		if errors.Is(err, ErrUntrustedPeer) || errors.Is(err, ErrUnsupported) {
			return nil, fmt.Errorf("session %s: %w", id, err)
		}
		return nil, m.ended(rec, err)
	}
	wc := worker.NewClient(halfCloser{conn}, conn)
	if err := wc.WaitReady(ctx); err != nil {
		conn.Close()
		return nil, m.ended(rec, err)
	}
	return &Session{m: m, rec: rec, client: wc, conn: conn}, nil
}

// ended explains a session whose worker is unreachable: the container's
// exit status and the worker's last words, or cause if it still runs.
func (m *Manager) ended(rec *record, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := m.engine()
	if err != nil {
		return fmt.Errorf("session %s: %w (and the daemon cannot be asked why: %v)", rec.ID, cause, err)
	}
	res, err := cli.ContainerInspect(ctx, rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("%w: session %s: its container was removed", ErrSessionEnded, rec.ID)
		}
		return fmt.Errorf("session %s: %w (inspect: %v)", rec.ID, cause, err)
	}
	st := res.Container.State
	if st == nil || st.Running {
		return fmt.Errorf("session %s: %w", rec.ID, cause)
	}
	why := fmt.Sprintf("the worker exited with status %d", st.ExitCode)
	if st.OOMKilled {
		why += " (killed: out of memory)"
	}
	if st.ExitCode == 137 {
		why += " (SIGKILL)"
	}
	if st.Error != "" {
		why += ": " + st.Error
	}
	if tail := m.logTail(ctx, rec.Container); tail != "" {
		why += ": " + lastLines(tail, 3)
	}
	return fmt.Errorf("%w: session %s: %s", ErrSessionEnded, rec.ID, why)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " / ")
}

// Exec runs c in session id, reusing this manager's connection to it.
func (m *Manager) Exec(ctx context.Context, id string, c Command) (*Result, error) {
	s, err := m.session(ctx, id)
	if err != nil {
		return nil, err
	}
	return s.Exec(ctx, c)
}

// session returns an open session for id, opening it if needed.
func (m *Manager) session(ctx context.Context, id string) (*Session, error) {
	m.mu.Lock()
	s := m.open[id]
	m.mu.Unlock()
	if s != nil {
		select {
		case <-s.client.Done():
			m.forget(s)
		default:
			return s, nil
		}
	}
	s, err := m.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	m.remember(s)
	return s, nil
}

func (m *Manager) remember(s *Session) {
	m.mu.Lock()
	if m.open == nil {
		m.open = map[string]*Session{}
	}
	old := m.open[s.rec.ID]
	m.open[s.rec.ID] = s
	m.mu.Unlock()
	if old != nil && old != s {
		old.Close()
	}
}

func (m *Manager) forget(s *Session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[s.rec.ID] == s {
		delete(m.open, s.rec.ID)
	}
}

// Discard destroys session id: its container (SIGKILL, then removal with
// its anonymous volumes), socket directory and record. A session that is
// already gone is ErrNoSession.
func (m *Manager) Discard(ctx context.Context, id string) error {
	rec, err := m.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = m.recordFromDaemon(ctx, id)
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	s := m.open[id]
	delete(m.open, id)
	m.mu.Unlock()
	if s != nil {
		s.Close()
	}
	err = m.removeContainer(rec.Container, rec.RunDir, id)
	if m.ReleaseProxyNet != nil && rec.Workspace != "" {
		m.ReleaseProxyNet(ctx, rec.Workspace)
	}
	return err
}

// listContainers lists this user's session and pool containers that carry
// the manager's labels, running or not.
func (m *Manager) listContainers(ctx context.Context, cli *client.Client) (client.ContainerListResult, error) {
	f := make(client.Filters).Add("label", LabelManaged+"=true", LabelKind+"="+KindSession, LabelOwner+"="+strconv.Itoa(os.Getuid()))
	for k, v := range m.Labels {
		f.Add("label", k+"="+v)
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return res, apiErr("list sessions", err)
	}
	return res, nil
}

// List lists this user's session and pool containers (those carrying the
// manager's labels), running or not.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	cli, err := m.engine()
	if err != nil {
		return nil, err
	}
	res, err := m.listContainers(ctx, cli)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, c := range res.Items {
		in := Info{Container: c.ID, Image: c.Labels[LabelImage], Workspace: c.Labels[LabelWorkspace], Task: c.Labels[LabelTask],
			State: string(c.State), Status: c.Status, Pool: c.Labels[LabelPool], Labels: c.Labels}
		if len(c.Names) > 0 {
			in.Name = strings.TrimPrefix(c.Names[0], "/")
		}
		in.ID, _ = strings.CutPrefix(in.Name, SessionPrefix)
		if !strings.HasPrefix(in.Name, SessionPrefix) {
			in.ID = ""
		}
		if in.Task == "" && in.ID != "" {
			in.Task = in.ID[:len(in.ID)-11]
		}
		if n, err := strconv.ParseInt(c.Labels[LabelCreated], 10, 64); err == nil {
			in.Created = time.Unix(n, 0)
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Info) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Close closes every session connection this manager holds (the sessions
// keep running).
func (m *Manager) Close() error {
	m.mu.Lock()
	open := m.open
	m.open = nil
	m.mu.Unlock()
	for _, s := range open {
		s.Close()
	}
	return nil
}

// InteractiveArgs returns the docker CLI argv that runs argv in session id
// with a TTY (`docker exec -it`), as the session's user in dir (inside the
// workspace) with the session's environment plus env. root runs it as root
// with the session's install capabilities, only in a session created with
// installs allowed.
func (m *Manager) InteractiveArgs(ctx context.Context, id string, argv []string, dir string, env map[string]string, tty, root bool) ([]string, error) {
	rec, err := m.readRecord(id)
	if errors.Is(err, fs.ErrNotExist) {
		rec, err = m.recordFromDaemon(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	if err := shellquote.Check(argv...); err != nil {
		return nil, err
	}
	cwd, err := resolveDir(rec.Workspace, dir)
	if err != nil {
		return nil, err
	}
	user := rec.User
	if root {
		if !rec.Install {
			return nil, fmt.Errorf("%w: session %s was created without session.allow_install", ErrInstallNotAllowed, id)
		}
		user = "0:0"
	}
	bin := m.Binary
	if bin == "" {
		bin = "docker"
	}
	args := []string{bin, "exec", "-i"}
	if tty {
		args = append(args, "-t")
	}
	args = append(args, "-u", user, "-w", cwd)
	vars := slices.Clone(rec.Env)
	vars = append(vars, worker.SpecEnv+"=")
	for _, k := range slices.Sorted(mapsKeys(env)) {
		vars = setEnv(vars, k+"="+env[k])
	}
	for _, kv := range vars {
		args = append(args, "-e", kv)
	}
	return append(append(args, rec.Container), argv...), nil
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// resolveDir checks a working directory against the workspace on the host
// (the worker checks again inside, against the same path).
func resolveDir(ws, dir string) (string, error) {
	if dir == "" {
		return ws, nil
	}
	p := dir
	if !filepath.IsAbs(p) {
		p = filepath.Join(ws, p)
	}
	p = filepath.Clean(p)
	if !paths.Within(ws, p) {
		return "", &worker.Error{Code: worker.CodeOutside, Message: fmt.Sprintf("cwd %q is outside the workspace %s", dir, ws)}
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", &worker.Error{Code: worker.CodeNotFound, Message: fmt.Sprintf("cwd %q: %v", dir, err)}
	}
	if !paths.Within(ws, real) {
		return "", &worker.Error{Code: worker.CodeOutside, Message: fmt.Sprintf("cwd %q resolves outside the workspace %s", dir, ws)}
	}
	return real, nil
}

// Session is a connection to one session's worker.
type Session struct {
	m      *Manager
	rec    *record
	client *worker.Client
	conn   io.Closer
	stderr *worker.TailBuffer // the worker's stderr, when attached to stdio
}

// ID is the session ID.
func (s *Session) ID() string { return s.rec.ID }

// Container is the container ID.
func (s *Session) Container() string { return s.rec.Container }

// Workspace is the session's workspace.
func (s *Session) Workspace() string { return s.rec.Workspace }

// Image is the image ID the session is pinned to.
func (s *Session) Image() string { return s.rec.Image }

// Ready is the worker's ready event.
func (s *Session) Ready() worker.Event { return s.client.Ready() }

// Done is closed when the connection to the worker ends.
func (s *Session) Done() <-chan struct{} { return s.client.Done() }

// Exec runs c in the session. A worker that died ends the session: the
// error wraps ErrSessionEnded and says how it died.
func (s *Session) Exec(ctx context.Context, c Command) (*Result, error) {
	if len(c.Argv) == 0 {
		return nil, fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	if err := shellquote.Check(c.Argv...); err != nil {
		return nil, err
	}
	if _, err := resolveDir(s.rec.Workspace, c.Dir); err != nil {
		return nil, err
	}
	a := worker.BashArgs{Command: shellquote.Join(c.Argv), Cwd: c.Dir, Env: c.Env, MaxOutputBytes: c.MaxOutputBytes, Stream: c.Output != nil}
	if c.Timeout > 0 {
		a.TimeoutMS = max(1, c.Timeout.Milliseconds())
	}
	if c.Stdin != nil {
		in := string(c.Stdin)
		a.Stdin = &in
	}
	res, err := s.client.Bash(ctx, a, c.Output)
	if err != nil && errors.Is(err, worker.ErrWorkerExited) {
		return nil, s.m.ended(s.rec, err)
	}
	return res, err
}

// Client is the raw protocol client (file tools: read, write, edit, glob,
// grep run inside the container under fsguard at the same paths).
func (s *Session) Client() *worker.Client { return s.client }

// Close drops this connection; the session keeps running.
func (s *Session) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.client.Close(ctx)
	err := s.conn.Close()
	s.m.forget(s)
	return err
}

// Discard destroys the session.
func (s *Session) Discard(ctx context.Context) error {
	s.Close()
	return s.m.Discard(ctx, s.rec.ID)
}

// halfCloser makes Close end only our sending side, so the worker answers
// what is in flight before the connection ends.
type halfCloser struct{ net.Conn }

func (h halfCloser) Close() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return h.Conn.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// attachment is the broker's end of a container's attached stdio.
type attachment struct {
	hj     client.HijackedResponse
	stdout *io.PipeReader
	stderr *worker.TailBuffer
	once   sync.Once
}

// attach attaches to a created container's stdio (before it starts, so
// nothing it writes is missed) and demultiplexes stdout and stderr.
func attach(ctx context.Context, cli *client.Client, cid string) (*attachment, error) {
	res, err := cli.ContainerAttach(ctx, cid, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, apiErr("attach to session container", err)
	}
	pr, pw := io.Pipe()
	a := &attachment{hj: res.HijackedResponse, stdout: pr, stderr: worker.NewTailBuffer(8 << 10)}
	go func() {
		_, err := stdcopy.StdCopy(pw, a.stderr, res.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	return a, nil
}

// Write sends to the worker's stdin.
func (a *attachment) Write(p []byte) (int, error) { return a.hj.Conn.Write(p) }

// Close detaches (the container's stdin stays open: it is not StdinOnce).
func (a *attachment) Close() error {
	a.once.Do(a.hj.Close)
	return nil
}
