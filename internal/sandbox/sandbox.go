// Package sandbox is the seam between vak's broker and the mechanisms that
// contain an agent's commands.
//
// A Backend contains either the whole worker process (Landlock on Linux,
// Seatbelt on macOS: ScopeProcess) or one tool command (Docker:
// ScopeCommand). Command-scoped backends implement Wrapper: the broker turns a
// Command into the argv of a wrapper (docker run ...) and places it into the
// worker's bash request, so the host worker stays a small protocol adapter.
//
// Resolve maps a requested backend name to the backend that will actually run,
// following vak's rules: auto means the platform's native backend; an explicit
// native backend the platform lacks falls back to the platform's real one,
// never to none; FullAccess disables sandboxing; nothing ever weakens to none
// silently.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"
)

// Mode is how much a sandboxed command may do.
type Mode int

// The modes, from most to least restricted.
const (
	// ReadOnly: the workspace and the root filesystem are read-only; only a
	// bounded private /tmp is writable. No network.
	ReadOnly Mode = iota + 1
	// WorkspaceWrite: the workspace is writable, the rest read-only or
	// private; no network beyond what policy allows.
	WorkspaceWrite
	// FullAccess disables sandboxing entirely, including the network.
	FullAccess
)

// Mode names as they appear in config and on the command line.
const (
	ModeNameReadOnly       = "read-only"
	ModeNameWorkspaceWrite = "workspace-write"
	ModeNameFullAccess     = "full-access"
)

// ErrUnknownMode reports a mode name that is not one of the three.
var ErrUnknownMode = errors.New("unknown sandbox mode")

// ParseMode parses a mode name.
func ParseMode(s string) (Mode, error) {
	switch s {
	case ModeNameReadOnly:
		return ReadOnly, nil
	case ModeNameWorkspaceWrite:
		return WorkspaceWrite, nil
	case ModeNameFullAccess:
		return FullAccess, nil
	}
	return 0, fmt.Errorf("%w %q (want %s, %s or %s)", ErrUnknownMode, s, ModeNameReadOnly, ModeNameWorkspaceWrite, ModeNameFullAccess)
}

func (m Mode) String() string {
	switch m {
	case ReadOnly:
		return ModeNameReadOnly
	case WorkspaceWrite:
		return ModeNameWorkspaceWrite
	case FullAccess:
		return ModeNameFullAccess
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Restricted reports whether m sandboxes anything.
func (m Mode) Restricted() bool { return m == ReadOnly || m == WorkspaceWrite }

// Narrowest returns the more restricted of a and b.
func Narrowest(a, b Mode) Mode {
	if a < b {
		return a
	}
	return b
}

// Scope says what a backend contains.
type Scope int

const (
	// ScopeProcess backends contain the whole worker process.
	ScopeProcess Scope = iota + 1
	// ScopeCommand backends contain one tool command at a time.
	ScopeCommand
)

func (s Scope) String() string {
	switch s {
	case ScopeProcess:
		return "process"
	case ScopeCommand:
		return "command"
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// Defaults for Limits: the caps every sandboxed command gets unless the
// user config's [sandbox.limits] says otherwise.
const (
	DefaultMemory    int64   = 2 << 30 // bytes
	DefaultCPUs      float64 = 2
	DefaultPids      int     = 256
	DefaultTmpfsSize int64   = 512 << 20 // bytes of the private /tmp
)

// DefaultProtected are workspace-relative paths that stay read-only even in
// WorkspaceWrite, whether or not they exist yet: files that make a host tool
// run code later, outside the sandbox, without the user asking to run the
// project's code (docs/filesystem.md has the reasoning for each):
//
//   - git: hooks and config (fsmonitor, hooksPath, aliases, filter and diff
//     drivers, sshCommand), the files that redirect git to another config
//     or git dir, and info/attributes (binds paths to filter drivers).
//     Entries below .git apply to every nested repository and submodule
//     too (fsguard.ExpandProtected); .git itself is pinned, and a new .git
//     anywhere is removed after the command (the tripwire);
//   - editors: .vscode (tasks that run on folder open, settings naming
//     interpreters and tool paths), .devcontainer and .devcontainer.json
//     (initializeCommand runs on the host at "Reopen in Container"), .idea
//     (JetBrains run configurations, file watchers, SDK paths);
//   - directory hooks: direnv's .envrc, mise's config files (env, hooks and
//     tasks run on cd), asdf/mise .tool-versions (a path: version puts a
//     workspace binary behind the tool's shim);
//   - vak's own project config.
var DefaultProtected = []string{
	".git/hooks", ".git/config", ".git/config.worktree", ".git/commondir",
	".git/worktrees", ".git/modules", ".git/info/attributes",
	".vscode", ".devcontainer", ".devcontainer.json", ".idea",
	".envrc", ".mise.toml", "mise.toml", ".mise.local.toml", "mise.local.toml",
	".mise", ".config/mise", ".config/mise.toml", ".tool-versions",
	".vak",
}

// Limits bound a sandboxed command's resources. Zero values mean "use the
// default"; call WithDefaults before use.
type Limits struct {
	Memory    int64   // bytes
	CPUs      float64 // CPU count, may be fractional
	Pids      int     // maximum number of processes
	TmpfsSize int64   // bytes of the private writable /tmp
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{Memory: DefaultMemory, CPUs: DefaultCPUs, Pids: DefaultPids, TmpfsSize: DefaultTmpfsSize}
}

// WithDefaults fills zero fields with the defaults.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.CPUs == 0 {
		l.CPUs = d.CPUs
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.TmpfsSize == 0 {
		l.TmpfsSize = d.TmpfsSize
	}
	return l
}

// Command is one tool command to run in a sandbox.
type Command struct {
	// ID uniquely identifies this command run; command-scoped backends name
	// their container after it so the broker can kill it on timeout.
	ID string
	// Shell is the command line, interpreted by POSIX sh -c.
	Shell string
	// Workspace is the canonical absolute path of the workspace.
	Workspace string
	// Dir is the working directory; it must be inside Workspace. Empty means
	// Workspace.
	Dir string
	// Env holds KEY=VALUE pairs the broker allows into the sandbox.
	Env []string
	// Mode is the sandbox mode; FullAccess commands never reach a backend.
	Mode Mode
	// Limits bound the command; zero fields are defaults.
	Limits Limits
	// Protection is the workspace's protected-path plan as it is right
	// now (fsguard.PlanProtection, made by the broker for this command): its
	// ReadOnly paths are mounted read-only and its Pin directories onto
	// themselves in WorkspaceWrite (the worker's tripwire removes
	// protected paths a command creates).
	Protection Protection
	// Network, if set, attaches a container to a proxied network (its
	// Mode); nil means no network at all.
	Network *NetworkAttachment
	// AgentHome, if set, is the persistent private home (agenthome): a host
	// directory bound read-write at the container's HOME. Empty means the
	// container's private /tmp serves as a fresh HOME.
	AgentHome string
	// Timeout, if positive, is the command's deadline (enforced by the caller;
	// backends use it to size cleanup).
	Timeout time.Duration
}

// NetworkAttachment joins a container to a workspace's proxied network:
// its packets leave only through the egress gateway.
type NetworkAttachment struct {
	// Mode is the Docker network mode, "container:NAME" of the netclient.
	Mode string
	// Binds are read-only HOST:CONTAINER bind mounts (public trust files).
	Binds []string
	// Env holds trust variables and secret placeholders (never real values).
	Env []string
	// Labels mark the container as a user of the network.
	Labels map[string]string
	// Gateway is the gateway's address on the sandbox network.
	Gateway netip.Addr
	// NestedPool is the netclient's nested Docker pool (netfence nested
	// mode); the zero prefix when the caller did not ask for nested mode.
	NestedPool netip.Prefix
	// TrustCA is the vak CA certificate's path inside the container, and
	// TrustEnv the CA trust variables alone (no placeholders).
	TrustCA  string
	TrustEnv []string
	// Fence, set instead of Mode, asks a process-scoped backend to fence
	// the sandbox's own network namespace (NetworkFence); Env then holds
	// the trust variables (pointing into FenceTrustDir) and the secret
	// placeholders.
	Fence *Fence
}

// FenceTrustDir is where a fenced sandbox sees Fence.TrustDir (read-only).
const FenceTrustDir = "/run/vak/trust"

// Fence is the host side of a fenced network namespace: the on-demand
// gateway's sockets, opened by the trusted stage before the sandboxed
// command starts (docs/gateway.md "Native proxied").
type Fence struct {
	// DataSocket is the gateway's transparent listener (PROXY v2 streams).
	DataSocket string
	// DNSSocket is its resolver (DNS over TCP framing).
	DNSSocket string
	// TrustDir is a host directory of public trust files (the gateway CA,
	// the bundle with the system roots), bound read-only at FenceTrustDir.
	TrustDir string
}

// Backend is a sandboxing mechanism.
type Backend interface {
	// Name is the backend's config name (landlock, seatbelt, docker, none).
	Name() string
	// Scope says whether the backend contains the process or each command.
	Scope() Scope
	// Available reports nil when the backend can run here, or an error that
	// says why not. Implementations cache expensive probes.
	Available(ctx context.Context) error
}

// Wrapper is implemented by command-scoped backends.
type Wrapper interface {
	Backend
	// Wrap returns the argv that runs c inside the sandbox.
	Wrap(c Command) ([]string, error)
	// HostEnv is the environment the host worker needs to run wrapped
	// commands (the wrapper's own client variables); it never reaches the
	// sandbox.
	HostEnv() []string
	// Remove removes whatever the wrapped command with this ID may have
	// left running after its wrapper died, timed out or was canceled.
	Remove(ctx context.Context, id string) error
	// WrapperFailed is asked after every wrapped command with its exit
	// code: it returns an error when the code is the wrapper's own failure
	// because the backend went away (fail closed, loudly), nil otherwise.
	WrapperFailed(ctx context.Context, exitCode int) error
}

// RunFunc runs one command from this process (a Runner's): the command's
// output goes to stdout and stderr, and it returns the command's exit
// status once the command and its output ended, or 125 with the reason on
// stderr when the backend failed (the wrapper's own failure, as
// Wrapper.WrapperFailed knows it). The lifeline (see Wrapper.Wrap) ends the
// command at its EOF; canceling ctx makes it return at once, leaving the
// caller to Remove what may be left. A non-nil error is a fault of the
// caller's, not of the backend.
type RunFunc func(ctx context.Context, lifeline *os.File, stdout, stderr io.Writer) (int, error)

// Runner is implemented by command-scoped backends that can run a
// non-interactive command from the calling process instead of through the
// process of Wrap's argv (docker: the Engine API instead of the docker
// CLI).
type Runner interface {
	Wrapper
	// Runner checks c as Wrap does and returns how it runs from this
	// process, or nil (and no error) when it cannot run here and the
	// caller uses Wrap.
	Runner(c Command) (RunFunc, error)
}

// InteractiveLifelineFD is the descriptor on which the worker hands an
// interactive wrapped command (InteractiveWrapper) the lifeline: the read
// end of a pipe whose write end only the broker holds, so it reaches EOF
// when the broker dies, however it dies. (A non-interactive wrapped
// command gets the lifeline as its stdin.)
const InteractiveLifelineFD = 3

// InteractiveWrapper is implemented by command-scoped backends that run
// interactive commands: stdin forwarded and, on request, a terminal
// allocated inside the sandbox.
type InteractiveWrapper interface {
	Wrapper
	// WrapInteractive returns the argv that runs c inside the sandbox with
	// its stdin forwarded and, with tty, on a terminal inside the sandbox.
	// The worker runs it with the user's input as its stdin (with tty: a
	// terminal the worker owns, whose size follows the user's) and the
	// lifeline on InteractiveLifelineFD; the command must die when the
	// lifeline ends. Signals for the command (wire.OpSignal: the names of
	// wire.Signals) are delivered to the wrapper's own process, not its
	// process group: the wrapper forwards them to the command inside the
	// sandbox, which the worker cannot reach.
	WrapInteractive(c Command, tty bool) ([]string, error)
}

// ErrNoInteractive reports an interactive command (stdin, a terminal) asked
// of a backend that cannot run one.
var ErrNoInteractive = errors.New("interactive commands (stdin, -i; a terminal, -t) are not supported by this backend")

// CheckInteractive is the capability query for interactive commands:
// process-scoped backends run them (their worker allocates the terminal
// inside the sandbox and owns its master), command-scoped ones when they
// implement InteractiveWrapper (docker: the terminal is the container's,
// and the lifeline moves off the command's stdin).
func CheckInteractive(b Backend) error {
	if b.Scope() == ScopeProcess {
		return nil
	}
	if _, ok := b.(InteractiveWrapper); ok {
		return nil
	}
	return fmt.Errorf("%w (%s); run it on the native backend", ErrNoInteractive, b.Name())
}
