package taskenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/worker/wire"
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
	LabelOwner     = engine.LabelOwner     // host uid of the user who created it
	LabelOwnerProc = engine.LabelOwnerProc // "BOOTID/PID/START" of the owning process, if any
	LabelSession   = "vak.session"         // session ID ("" for a pool container: its name says)
	LabelTask      = "vak.task"            // the task name
	LabelCreated   = "vak.created"         // creation time, unix seconds
	LabelImage     = "vak.image"           // the pinned image ID
	LabelLifetime  = "vak.lifetime"        // maximum lifetime, seconds
	LabelIdle      = "vak.idle"            // idle timeout, seconds
	LabelPolicy    = "vak.policy"          // digest of the session's policy (network, mode, install)
	LabelInstall   = "vak.install"         // "true" when root package installs are allowed
	LabelPool      = "vak.pool"            // pool key of a container created for the warm pool
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
	// ErrUnsupported reports a session feature this host cannot provide; it
	// is engine.ErrUnsupported.
	ErrUnsupported = engine.ErrUnsupported
	// ErrWorkerBinary reports a worker binary that cannot be a session
	// container's entrypoint; it is engine.ErrWorkerBinary.
	ErrWorkerBinary = engine.ErrWorkerBinary
	// ErrNoSession reports an unknown session ID.
	ErrNoSession = errclass.New(errclass.Invalid, "no such session")
	// ErrSessionExists reports a session for the same task and workspace.
	ErrSessionExists = errclass.New(errclass.Invalid, "session already exists")
	// ErrSessionEnded reports a session whose worker is gone (it died, was
	// killed, or hit its idle timeout or lifetime); the message says which.
	ErrSessionEnded = errclass.New(errclass.Unavailable, "session ended")
	// ErrSessionPaused reports a session whose container is paused
	// (`docker pause`): its worker cannot answer until it is unpaused. The
	// message names the container and `docker unpause`.
	ErrSessionPaused = errclass.New(errclass.Unavailable, "session paused")
	// ErrUntrustedPeer reports that the session socket is not served by the
	// session's worker (it was replaced from inside the container).
	ErrUntrustedPeer = errors.New("session socket is not the session's worker")
	// ErrInvalidSpec reports a session spec the broker refuses.
	ErrInvalidSpec = errclass.New(errclass.Invalid, "invalid session spec")
	// ErrEnvNotAllowed reports a Spec.Env variable outside the allowlist.
	ErrEnvNotAllowed = errclass.New(errclass.Invalid, "environment variable not allowed into sessions")
	// ErrNetworkPolicy reports a network policy that is not implemented.
	ErrNetworkPolicy = errclass.New(errclass.Invalid, "network policy not available")
	// ErrNetworkUnavailable reports a proxied network that could not be
	// brought up (the egress gateway is down or cannot start): nothing was
	// created, as with `vak run`.
	ErrNetworkUnavailable = errclass.New(errclass.Unavailable, "proxied network unavailable")
	// ErrInstallNotAllowed reports a root exec in a session created without
	// package installs allowed.
	ErrInstallNotAllowed = errclass.New(errclass.Invalid, "package installs are not allowed in this session")
)

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
	// NetworkPolicy; empty means sandbox.NetworkNone.
	NetworkPolicy sandbox.NetworkPolicy
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
	// Docker gives the session a nested Docker engine behind vak's API
	// guard (docs/nested-docker.md); DOCKER_HOST in the commands'
	// environment names the guard's socket. Needs sandbox.NetworkProxied.
	Docker bool
	// DockerPlaceholders names the secret placeholders the guard sets in
	// every inner container (from the trusted config's
	// session.docker_placeholders; never from a project config). Each must
	// be a placeholder of the proxied network. Empty: inner containers get
	// no placeholders.
	DockerPlaceholders []string
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
	// StdinStream, if set, is streamed to the command's standard input as
	// it arrives (an interactive request: the command may answer before
	// the input ends); it needs Output and excludes Stdin.
	StdinStream io.Reader
	// Signal, with StdinStream, delivers signals to the command by name
	// (one of wire.Signals). The command replaces the worker's shell (it is
	// exec'd), so that a signal reaches it rather than killing a shell
	// around it first.
	Signal <-chan string
	// MaxOutputBytes bounds stdout and stderr each; zero means the
	// protocol's default (1 MiB).
	MaxOutputBytes int64
	// Output, if set, streams output as it arrives; the result then carries
	// none.
	Output func(stream string, data []byte)
}

// Result is a command's outcome.
type Result = wire.BashResult

// Manager creates and drives sessions. Its zero value works (with the
// defaults named on each field); set fields before first use.
type Manager struct {
	// API is the Engine API client; nil means engine.New on first use.
	API *client.Client
	// StateDir is vak's state directory (session records and per-session
	// socket directories); empty means paths.EnsureStateDir.
	StateDir string
	// Worker is the static Linux vak binary that is every session's
	// entrypoint; empty means this executable.
	Worker string
	// User is the identity inside; zero means the invoking uid:gid.
	User docker.User
	// Labels are added to every container and image the manager creates,
	// and restrict List and GC to objects that carry them (tests: vak.test=1).
	Labels map[string]string
	// IdleTimeout and MaxLifetime bound every session; zero means
	// DefaultIdleTimeout and DefaultMaxLifetime.
	IdleTimeout, MaxLifetime time.Duration
	// Runtime is the OCI runtime session containers run under
	// (sandbox.runtime): empty for engine.DefaultRuntime (runc, named on
	// the container whatever the daemon's default is), runc, or gVisor's
	// runsc registered with GVisorSessionArgs. Anything else, or gVisor
	// with a proxied network, fails Create with ErrRuntime.
	Runtime string
	// AllowInstall gives sessions the capabilities package managers need as
	// root and allows root commands through `docker exec -u 0`
	// (InteractiveArgs with root). Commands sent through the worker always
	// run as the session's unprivileged user.
	AllowInstall bool
	// EnvAllowlist names the variables Spec.Env may carry; nil means
	// hostenv.Allowlist().
	EnvAllowlist []string
	// PolicyGeneration is the operator's policy generation, hashed into
	// snapshot keys (bump it to invalidate every snapshot); empty means "1".
	PolicyGeneration string
	// PoolSize is how many started containers FillPool keeps ready per pool
	// key; zero disables the pool (Create then never claims).
	PoolSize int
	// UserHome is the home directory whose credentials are never mounted; empty
	// means the invoking user's.
	UserHome string
	// Binary is the docker CLI used only for interactive TTY execs; empty
	// means "docker".
	Binary string
	// ProxyNet gives sessions with sandbox.NetworkPolicy proxied their network (the
	// CLI wires the workspace's egress topology here). Nil refuses proxied
	// sessions.
	// nested asks for netfence nested mode (a Spec.Docker session). The
	// caller holds the network until it calls done (nothing removes it
	// before): Create and FillPool call it once their containers, which
	// carry att's labels and keep the network from then on, exist, or
	// when they failed.
	ProxyNet func(ctx context.Context, workspace string, nested bool) (att *sandbox.NetworkAttachment, done func(), err error)
	// ReleaseProxyNet is called when a session is discarded, so a
	// workspace's topology goes when its last user does. May be nil.
	ReleaseProxyNet func(ctx context.Context, workspace string)
	// DockerImage is the nested engine's sidecar image (dockerd.EnsureImage's
	// tag); empty refuses Spec.Docker. SidecarTimeout bounds its start
	// (zero: DefaultSidecarTimeout).
	DockerImage    string
	SidecarTimeout time.Duration
	// OnPoolReject, if set, is told about each warm-pool --docker pair a
	// Create refused to hand out (its sidecar is not what a cold create
	// would start, or does not answer) and removed; the Create goes on
	// with the next pair or a cold create.
	OnPoolReject func(name string, err error)
	// DockerBaseline is how the sidecar is isolated (dockerd.ChooseBaseline
	// from the Engine's runtimes and session.docker_runtime; empty: the
	// capability-listed runc sidecar). Recorded with the session.
	DockerBaseline dockerd.Baseline
	// Watcher is the vak binary, runnable on this host, that runs each
	// workspace-write session's workspace watcher (vak __session-watch;
	// see watcher.go); empty means Worker, or this executable. Create
	// fails when the watcher cannot start.
	Watcher string
	// Planted, if set, is told what a session's workspace watcher removed,
	// cleared or warned of, as log lines: its whole log when the session
	// ends (Discard, GC), and what a watcher's first pass found when Create
	// or a later call started it.
	Planted func(id string, lines []string)

	mu        sync.Mutex
	open      map[string]*Session
	engineErr error
	workers   map[string]error // worker binary checks, per path and arch

	// mutatePlan, if set, changes a validated plan (tests: simulate a
	// mount swapped between check and mount).
	mutatePlan func(*plan)
}

func (m *Manager) engine() (*client.Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.API == nil && m.engineErr == nil {
		m.API, m.engineErr = engine.New()
	}
	if m.engineErr != nil {
		return nil, m.engineErr
	}
	return m.API, nil
}

func (m *Manager) user() docker.User {
	if m.User == (docker.User{}) {
		return docker.User{UID: os.Getuid(), GID: os.Getgid()}
	}
	return m.User
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

// validTask reports whether task is a task name: 1 to 40 characters,
// letters, digits, '_', '.' and '-', starting with a letter or digit
// (`^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$`). Checked by hand, not by a regexp:
// compiling one costs a short-lived CLI process (vak session exec) a
// quarter of a millisecond.
func validTask(task string) bool {
	if len(task) == 0 || len(task) > 40 || !alnumByte(task[0]) {
		return false
	}
	for i := 1; i < len(task); i++ {
		if c := task[i]; !alnumByte(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// idHashLen is the length of a session ID's hash (SessionID).
const idHashLen = 10

func alnumByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// taskPattern is what validTask accepts, for messages.
const taskPattern = `^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$`

// SessionID is the ID of the session for task in workspace: the task and a
// hash of both, so one workspace's tasks and one task's workspaces differ.
func SessionID(task, workspace string) string {
	h := sha256.Sum256([]byte(task + "\x00" + workspace))
	return task + "-" + hex.EncodeToString(h[:idHashLen/2])
}

// ValidID reports whether id has the shape of a session ID: a task name,
// '-' and the hash in lower-case hex
// (`^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}-[0-9a-f]{10}$`); it keeps IDs safe as
// file names.
func ValidID(id string) bool {
	n := len(id) - idHashLen - 1
	if n < 1 || id[n] != '-' {
		return false
	}
	for i := n + 1; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return validTask(id[:n])
}
