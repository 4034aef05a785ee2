package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"sync"
	"time"

	"vak/internal/errclass"
)

// WorkerCommand is the hidden subcommand of the vak binary that runs a
// worker: the broker re-executes vak with it, and process-scoped backends
// re-execute it again for their later stages.
const WorkerCommand = "__worker"

// ProcessPolicy is what a process-scoped backend contains the worker to. It
// is decided by the broker from trusted config; every path is a canonical
// absolute host path.
type ProcessPolicy struct {
	Workspace string
	Mode      Mode
	// TempDir is the session's private temp dir (the broker creates and
	// removes it).
	TempDir string
	// UserHome is the invoking user's home directory. The sandbox sees a
	// private home in its place, never the real one.
	UserHome string
	// AgentHome, if set, is the persistent private home (agenthome): a host
	// directory the sandbox gets read-write as its HOME. Empty means a
	// fresh, empty home for this session only.
	AgentHome string
	// AgentHomeFallback says AgentHome is only the default: a backend that cannot
	// place it (see landlock) gives a fresh home instead of failing.
	AgentHomeFallback bool
	// ReadPaths and WritePaths come from trusted config only.
	ReadPaths  []string
	WritePaths []string
	// Protected are the configured protected paths (workspace-relative):
	// they stay read-only even in WorkspaceWrite, whether or not they
	// exist yet. The mounts that keep the existing ones so come later, in
	// the plan WorkerLaunch.Spec is given.
	Protected []string
	Limits    Limits
	// Env holds the KEY=VALUE pairs of the host that reach commands (already
	// scrubbed by the broker, PATH included). The backend adds HOME and
	// TMPDIR as they appear inside its sandbox.
	Env []string
	// AllowWeaker accepts a weaker sandbox than designed when the platform
	// cannot provide it (explicit trusted opt-in).
	AllowWeaker bool
	// Network, if set, asks for a proxied network: its Fence (the backends
	// that are FenceProviders; the others refuse it, see RefuseNetwork).
	Network *NetworkAttachment
}

// WorkerLaunch is what a process-scoped backend adds to the worker's start.
type WorkerLaunch struct {
	// Env is the complete environment of sandboxed commands.
	Env []string
	// Spec, if set, returns the backend's own data for its worker entry
	// point (see RegisterWorker), which the worker spec carries opaquely,
	// for the workspace's protected-path plan (made by the broker alone,
	// fsguard.PlanProtection or the same from the walk of its baseline).
	// The broker calls it once, after the worker process started: its walk
	// of the workspace overlaps the worker's own start-up, and the worker
	// reads its spec only when that is done.
	Spec func(Protection) (json.RawMessage, error)
	// ExtraFiles are passed to the worker after its spec descriptor.
	ExtraFiles []*os.File
	// Started, if set, runs after the worker process started and before it
	// receives its spec, so nothing sandboxed runs before it returns; an
	// error kills the worker.
	Started func(pid int) error
	// SpecFirst says that the worker waits by itself for Started to finish
	// before it runs anything sandboxed (Started sends it a go-ahead
	// through one of ExtraFiles): the broker then sends the spec before it
	// calls Started, so that Started overlaps the worker's own start-up.
	SpecFirst bool
	// Cleanup, if set, releases what PrepareWorker made; it runs once, when
	// the session ends or its start fails.
	Cleanup func()
	// SweepAtClose says that every process of the sandbox ends with the
	// worker (Landlock's PID namespace): the broker snapshots the
	// workspace while the worker starts (before its first request) and,
	// in WorkspaceWrite, sweeps it once more when the session ends
	// (background jobs can plant after the last command's check).
	SweepAtClose bool
	// NoSetIDModes says no sandboxed process can give a file the setuid
	// or setgid bit through a mode change (Landlock's seccomp filter
	// refuses chmod and its kin with either bit): a file gains one only
	// by being created with it, which a watch of the directory it is made
	// in, linked or renamed into sees. The broker's snapshot then stats no
	// file (worker.WatchedSnapshot), and its sweep clears the bits of the
	// files that gained them while the sandbox ran.
	NoSetIDModes bool
}

// ProcessBackend is implemented by process-scoped backends (Landlock,
// Seatbelt): they contain the whole worker process.
type ProcessBackend interface {
	Backend
	// PrepareWorker adapts cmd, the worker command (the vak binary with
	// argument WorkerCommand, its Dir the workspace), so that the worker
	// starts contained by p: it may replace Path and Args, append
	// arguments, and set SysProcAttr.
	PrepareWorker(ctx context.Context, p ProcessPolicy, cmd *exec.Cmd) (*WorkerLaunch, error)
}

// ErrNoNetwork reports a proxied network requested from a backend that
// cannot attach one: the request fails closed, nothing runs without it.
var ErrNoNetwork = errclass.New(errclass.Unavailable, "this sandbox backend cannot attach a proxied network")

// NetworkKind is how a backend attaches a proxied network.
type NetworkKind int

const (
	// NetworkTopology: command containers join a per-workspace Docker
	// topology whose netclient holds the fence (command-scoped backends;
	// NetworkAttachment.Mode).
	NetworkTopology NetworkKind = iota + 1
	// NetworkFence: the process-scoped sandbox fences its own network
	// namespace toward the user's on-demand gateway on the host
	// (NetworkAttachment.Fence).
	NetworkFence
)

func (k NetworkKind) String() string {
	switch k {
	case NetworkTopology:
		return "topology"
	case NetworkFence:
		return "fence"
	}
	return fmt.Sprintf("NetworkKind(%d)", int(k))
}

// FenceProvider is implemented by process-scoped backends that can fence
// the sandbox's own network namespace (Landlock on Linux).
type FenceProvider interface {
	ProcessBackend
	// FenceNetwork reports nil when the fence can be built here, or why
	// not.
	FenceNetwork() error
}

// ProxiedNetwork says how b attaches a proxied network: command-scoped
// backends (Wrapper) join a topology, process-scoped ones that provide a
// fence fence their namespace. It is the one place this rule lives: the
// command line asks it before it brings a network up, the broker and the
// process backends enforce it.
func ProxiedNetwork(b Backend) (NetworkKind, error) {
	if _, ok := b.(Wrapper); ok {
		return NetworkTopology, nil
	}
	if f, ok := b.(FenceProvider); ok {
		if err := f.FenceNetwork(); err != nil {
			return 0, fmt.Errorf("%w: %s: %w", ErrNoNetwork, b.Name(), err)
		}
		return NetworkFence, nil
	}
	return 0, fmt.Errorf("%w (--backend docker); the %s sandbox has no network at all", ErrNoNetwork, b.Name())
}

// CheckNetwork is ProxiedNetwork's verdict alone.
func CheckNetwork(b Backend) error {
	_, err := ProxiedNetwork(b)
	return err
}

// RefuseNetwork checks a requested network (n != nil) against what b
// attaches: an attachment of the other kind is refused too.
func RefuseNetwork(b Backend, n *NetworkAttachment) error {
	if n == nil {
		return nil
	}
	kind, err := ProxiedNetwork(b)
	if err != nil {
		return err
	}
	if (n.Fence != nil) != (kind == NetworkFence) {
		return fmt.Errorf("%w: the %s sandbox attaches a proxied network by %s, not as requested", ErrNoNetwork, b.Name(), kind)
	}
	return nil
}

// Describer is implemented by backends that can say more about their state
// than Available does (vak doctor shows it): a server version, the kernel
// features in force, a weaker-than-designed verdict.
type Describer interface {
	Describe(ctx context.Context) string
}

// LimitsDescriber is implemented by backends that can say how they enforce
// Limits here: vak doctor prints one line per limit, each with its value
// and what enforces it ("memory 2048 MiB in total (cgroup v2 ...)", or
// "... NOT enforced (...)"). A backend must start its sandboxes with
// exactly what it describes.
type LimitsDescriber interface {
	DescribeLimits(Limits) []string
}

// LimitLines are a LimitsDescriber's lines: each of l's limits (defaults
// filled in) followed by what enforces it.
func LimitLines(l Limits, memory, pids, cpus, tmp string) []string {
	l = l.WithDefaults()
	return []string{
		fmt.Sprintf("memory %d MiB %s", l.Memory>>20, memory),
		fmt.Sprintf("pids %d %s", l.Pids, pids),
		fmt.Sprintf("cpus %g %s", l.CPUs, cpus),
		fmt.Sprintf("tmp %d MiB %s", l.TmpfsSize>>20, tmp),
	}
}

// StaleCleaner is implemented by backends that can leave host state behind
// when a broker is killed (cgroups, ...). CleanStale removes the state of
// brokers that alive reports gone and returns what it removed.
type StaleCleaner interface {
	CleanStale(alive func(pid int) bool) []string
}

// WorkerStart is what the re-executed worker hands its backend's entry point.
type WorkerStart struct {
	// Stage is the --stage argument of `vak __worker` (1 unless a backend
	// re-executed itself with another).
	Stage int
	// Data is the backend's own spec (WorkerLaunch.Spec).
	Data json.RawMessage
	// RawSpec is the whole worker spec, to pass on to a later stage.
	RawSpec []byte
}

// WorkerOutcome is what a backend's entry point did.
type WorkerOutcome struct {
	// Exited says the process's work is done (it ran a later stage to
	// completion): exit with Code and serve nothing.
	Exited bool
	Code   int
	// Description says what restrictions are in force; the worker then
	// serves the protocol (sent in its ready event).
	Description string
	// Spawn, if set, is how the worker starts every command: it runs
	// start (which forks and executes it) on a thread the backend
	// prepared for that (Landlock: one of the two threads whose capability
	// bounding set is empty, see Serve; a child inherits its creator
	// thread's).
	Spawn func(start func() error) error
	// Serve, if set, runs the worker's request loop (loop) on the thread
	// the backend prepared for it, and returns when loop does. Spawn called
	// from that loop starts a command right there (Landlock: the loop's
	// thread is one whose bounding set is empty): a request is read and
	// its command forked on one thread, with no hand-off between them.
	Serve func(loop func())
	// Sessions, if set, names the sessions of the command whose session
	// is root (a command leads its own): root's and those its processes
	// made with setsid, which the sandbox recorded (landlock: the setsid
	// supervisor). The worker kills every process in them when it kills
	// the command. Without it, a command is its own session's processes.
	Sessions func(root int) ([]int, error)
	// Phases are what the backend timed before this process began
	// (landlock: stage 1), for the ready event (wire.Event.Phases).
	Phases []Phase
}

// Phase is one timed part of a worker's start, measured by its backend; a
// zero Start means when the worker was spawned.
type Phase struct {
	Name       string
	Start, End time.Time
}

// WorkerEntry is a backend's code in the re-executed worker process: it runs
// before the worker serves anything and restricts the process as the
// backend requires.
type WorkerEntry func(ctx context.Context, s WorkerStart) (WorkerOutcome, error)

var (
	entriesMu sync.Mutex
	entries   = map[string]WorkerEntry{}
)

// RegisterWorker makes e the worker entry point of the backend named name
// (in the spirit of tailscale's childproc: each backend registers its own
// re-exec stages from an init function, and `vak __worker` only looks them
// up). Registering a name twice panics.
func RegisterWorker(name string, e WorkerEntry) {
	entriesMu.Lock()
	defer entriesMu.Unlock()
	if _, dup := entries[name]; dup {
		panic("sandbox: worker entry registered twice: " + name)
	}
	entries[name] = e
}

// LookupWorker returns the worker entry point registered for name.
func LookupWorker(name string) (WorkerEntry, error) {
	entriesMu.Lock()
	defer entriesMu.Unlock()
	e, ok := entries[name]
	if !ok {
		names := make([]string, 0, len(entries))
		for n := range entries {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("%w: no worker entry for backend %q (registered: %v)", ErrNotRegistered, name, names)
	}
	return e, nil
}

// DescribeWorker returns a WorkerEntry that restricts nothing itself (the
// backend contained the process from outside, or each command) and reports
// desc.
func DescribeWorker(desc string) WorkerEntry {
	return func(context.Context, WorkerStart) (WorkerOutcome, error) {
		return WorkerOutcome{Description: desc}, nil
	}
}
