// Package landlock is vak's Linux process-scoped sandbox.
//
// The worker restricts itself before it serves a single request, in two
// re-executed stages (never in the long-lived broker):
//
//  1. Stage 1 starts in new user, mount, PID, network, IPC and UTS namespaces
//     (root only inside its own user namespace). It builds a minimal
//     filesystem view on a fresh tmpfs and pivots into it: the toolchain's
//     system directories read-only (with /etc's secrets masked), the
//     workspace at its own path (read-only or read-write by mode, protected
//     paths re-mounted read-only), a private /tmp, an empty private HOME, a
//     fresh /proc and a minimal /dev. Nothing else of the host exists in
//     the view: not ~/.ssh, not other projects, not /run/docker.sock. The
//     network namespace has only a loopback that is down, or, for a proxied
//     network (Policy.Fence), a loopback fenced toward the user's on-demand
//     gateway by rules stage 1 installs and a forwarder and DNS relay stage
//     1 serves for the sandbox's lifetime.
//  2. Stage 1 then starts stage 2 in a nested user namespace that maps the
//     invoking uid/gid back, so tools see their usual identity and hold no
//     capabilities over the mount namespace. Stage 2 drops every capability,
//     sets no_new_privs and rlimits, applies Landlock (the strongest ABI the
//     kernel offers: filesystem rules mirroring the view, TCP bind/connect
//     denied unless proxied) and a seccomp filter
//     (no AF_INET/AF_INET6 sockets unless proxied, never AF_PACKET/raw
//     sockets, no ptrace, io_uring, bpf,
//     namespaces, mounts, keyrings, TIOCSTI, ...; setsid through a seccomp
//     user notification answered by stage 1, which records each new
//     session's command for the kill, see notify_linux.go), and only then
//     serves the worker protocol.
//
// Stage 1 stays behind as the PID namespace's init: when it exits, the kernel
// kills every process of the sandbox.
//
// Why stage 2 is a process of its own, re-executed: the nested user
// namespace can only be entered by a single-threaded process
// (unshare(CLONE_NEWUSER) and setns refuse a multi-threaded caller), and a
// Go program has several threads before its first line runs; without cgo
// there is no code before the runtime's. So it is created by clone with
// CLONE_NEWUSER, which Go only offers together with exec. Merging the
// stages would mean dropping that namespace: commands would then run in
// the user namespace that owns the view's mounts, where only the dropped
// capabilities, not the namespace boundary, keep them from changing the
// view. And stage 1 has to stay unrestricted as init, setsid supervisor
// and fence. The cost of the extra process is therefore kept
// small instead: everything vak links is initialised lazily where it is
// expensive (TestInitAllocations in internal/cli), and the worker builds
// only its own command.
//
// If the kernel lacks Landlock or user namespaces, the worker refuses to
// start unless trusted config sets sandbox.allow_weaker, which vak doctor
// then reports.
package landlock

import (
	"context"
	"errors"
	"log"
	"net"
	"time"

	"vak/internal/sandbox"
)

// processStart is when this package was initialised in this process: the
// end of a stage's process start in vak run --trace.
var processStart = time.Now()

// ErrUnsupported is returned on platforms without Landlock.
var ErrUnsupported = errors.New("landlock is only available on Linux")

// FenceServer is stage 1's side of a proxied network (Policy.Fence): it
// fences the current network namespace and serves the forwarder and the
// DNS relay, which reach the gateway only through dialData and dialDNS,
// until stop is called. The program that is re-executed as the worker
// passes netfence's native fence to WorkerEntry (internal/launch); landlock
// does not import netfence itself so that the fence's tests may use the
// landlock test helpers. Without one, proxied runs are refused (nothing
// runs without the fence).
type FenceServer func(dialData, dialDNS func(context.Context) (net.Conn, error), errLog *log.Logger) (stop func(), err error)

// ErrUnavailable reports a Linux kernel that cannot provide the sandbox.
var ErrUnavailable = errors.New("landlock sandbox unavailable")

// DefaultSystemPaths are mounted read-only (and granted read+execute) when
// they exist: what a toolchain needs to run.
var DefaultSystemPaths = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc", "/opt", "/nix", "/snap",
}

// MaskedPaths exist in the view but read as empty: secrets of the host that
// a root-owned sandbox could otherwise read through /etc.
var MaskedPaths = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/sudoers", "/etc/sudoers.d", "/etc/ssl/private", "/etc/ssh",
	"/etc/security/opasswd", "/etc/docker", "/etc/containerd", "/etc/vak",
}

// DevNodes are the device files bound into the view's /dev.
var DevNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// Policy says what the sandboxed worker may touch. All paths are canonical
// absolute host paths; in the view they appear at the same path.
type Policy struct {
	Workspace string
	Mode      sandbox.Mode
	// TempDir is the private per-session temp dir, mounted at /tmp (TMPDIR).
	TempDir string
	// UserHome is the user's home: it is replaced by an empty private tmpfs,
	// or by AgentHome.
	UserHome string
	// AgentHome, if set, is the persistent private home bound read-write
	// at Home (at HOME without namespaces). Mount points below Home are
	// created in it without following links (its content is the
	// sandbox's).
	AgentHome string `json:",omitempty"`
	// ReadPaths and WritePaths come from trusted config only.
	ReadPaths  []string
	WritePaths []string
	// Protected are absolute paths inside the workspace that stay read-only
	// (the existing ones, fsguard.Plan.ReadOnly).
	Protected []string
	// Pin are absolute paths of existing directories inside the workspace
	// bound onto themselves read-write, so that the command cannot rename,
	// remove or replace them (`.git`, parents of protected paths;
	// fsguard.Plan.Pin).
	Pin    []string
	Limits sandbox.Limits
	// SystemPaths default to DefaultSystemPaths.
	SystemPaths []string
	// AllowWeaker accepts running without namespaces or without Landlock
	// when the kernel cannot provide them (explicit trusted opt-in).
	AllowWeaker bool
	// UID and GID are the invoking user's, restored inside stage 2.
	UID, GID int
	// GoAhead makes stage 1 wait for one byte on GoAheadFD before it
	// starts stage 2: the broker sends it once stage 1 is in the session's
	// cgroup (where sessions get one), so that joining the cgroup overlaps stage 1's
	// start-up and the view, and nothing sandboxed runs outside it.
	GoAhead bool `json:",omitempty"`
	// Fence, if set, gives the sandbox's network namespace a proxied
	// network instead of none: stage 1 fences it (netfence.ServeLocal) and
	// relays to the on-demand gateway through the descriptors named here;
	// stage 2 then may create IPv4/IPv6 sockets and connect anywhere (every
	// connection reaches the forwarder).
	Fence *FenceSpec `json:",omitempty"`
}

// FenceSpec is the stage-1 side of sandbox.Fence.
type FenceSpec struct {
	// DataFD and DNSFD are stage 1's O_PATH descriptors of the gateway's
	// data and DNS sockets (opened by the broker before the sandbox
	// starts; stage 1 connects through /proc/self/fd).
	DataFD, DNSFD int
	// TrustDir is the host directory bound read-only at
	// sandbox.FenceTrustDir.
	TrustDir string
}

// GoAheadFD is the descriptor on which stage 1 waits for its go-ahead
// (Policy.GoAhead): the extra file after the spec.
const GoAheadFD = 4

// goAheadByte is the go-ahead's content.
const goAheadByte = 'G'

// Status describes what the kernel offers (for vak doctor).
type Status struct {
	ABI     int  // Landlock ABI version, 0 if unavailable
	UserNS  bool // unprivileged user namespaces work
	Seccomp bool
	// Cgroup is "v1" or "v2" when sessions get a cgroup of their own
	// (always as root; for others where their cgroup is delegated), which
	// enforces the limits of CgroupControllers (pids, memory, cpu).
	Cgroup            string
	CgroupControllers []string
	Weaker            bool   // the sandbox would run weaker than designed (allowed by config)
	Problem           string // why it is unavailable or weaker
	Restricted        string // one-line summary of the restrictions in force
}
