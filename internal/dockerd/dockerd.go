// Package dockerd is the nested Docker engine of a task environment
// (`vak session create --docker`): the sidecar container that runs dockerd
// in the netclient's network namespace, its image (a Debian root built
// offline by debootstrap, content-addressed by its recipe), and its
// security spec: exactly the capabilities dockerd was measured to need
// (docs/nested-docker.md), Docker's default seccomp profile plus four
// syscalls (generated in code), a private cgroup namespace (a hard
// requirement, checked at start), memory and pids limits, and a daemon.json
// that pins the inner address pool and the gateway as DNS.
//
// The raw daemon socket lives in a directory on a tmpfs that only the
// sidecar mounts; nothing in the agent's reach gets it. See
// docs/nested-docker.md.
package dockerd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"
)

// Capabilities are exactly what dockerd needs in the sidecar (measured by
// removing each in turn): Docker's 14 defaults, which runc can only grant
// inner containers if the sidecar holds them, plus SYS_ADMIN (cgroup2 and
// overlay mounts) and NET_ADMIN (dockerd's bridges and iptables rules).
// Everything else is dropped.
var Capabilities = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
	"SYS_CHROOT", "SYS_ADMIN", "NET_ADMIN",
}

// ExtraSyscalls are allowed on top of Docker's default seccomp profile:
// runc needs the session keyring (keyctl, add_key, request_key) and
// pivot_root to start inner containers.
var ExtraSyscalls = []string{"keyctl", "add_key", "request_key", "pivot_root"}

// Paths inside the sidecar.
const (
	// RawSocketDir holds the raw daemon socket, on a tmpfs only the sidecar
	// mounts.
	RawSocketDir = "/run/vak-dockerd"
	// RawSocket is the raw daemon socket.
	RawSocket = RawSocketDir + "/docker.sock"
	// DataDir is dockerd's state, on a named volume (overlay2 does not work
	// on the container's own overlay root).
	DataDir = "/var/lib/docker"
	// DaemonConfig is where the entrypoint writes daemon.json.
	DaemonConfig = "/etc/docker/daemon.json"
	// CAStoreFile is where the entrypoint installs the vak CA.
	CAStoreFile = "/usr/local/share/ca-certificates/vak-gateway.crt"
	// CABundle is the system bundle the entrypoint appends the vak CA to
	// (what dockerd's Go TLS reads for pulls through the gateway).
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// Defaults for the sidecar's resource limits (inner containers' own limits
// are not enforced: the fresh cgroup2 hierarchy has no controllers, so
// these bound everything the agent starts).
const (
	DefaultMemory    = 4 << 30
	DefaultPidsLimit = 4096
)

// Daemon is the nested engine's configuration.
type Daemon struct {
	// Pool is the pinned inner address pool (netfence's NestedPool).
	Pool netip.Prefix
	// Gateway is the sandbox gateway, the inner containers' DNS server.
	Gateway netip.Addr
}

// Validate checks d.
func (d Daemon) Validate() error {
	if !d.Pool.IsValid() || !d.Pool.Addr().Is4() || d.Pool.Bits() > 24 {
		return fmt.Errorf("dockerd: inner pool %v must be an IPv4 prefix of at most /24", d.Pool)
	}
	if !d.Gateway.Is4() {
		return fmt.Errorf("dockerd: gateway %v must be an IPv4 address", d.Gateway)
	}
	if d.Pool.Contains(d.Gateway) {
		return fmt.Errorf("dockerd: inner pool %v contains the gateway %v", d.Pool, d.Gateway)
	}
	return nil
}

// DaemonJSON is the daemon.json for d: overlay2, the default bridge and
// every user-defined network inside the pinned pool (/24 each; the default
// bridge takes the first), the gateway as the only DNS server, no IPv6
// rules, and the socket in RawSocketDir only.
func (d Daemon) DaemonJSON() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	first := d.Pool.Addr().As4()
	first[3] = 1
	cfg := map[string]any{
		"storage-driver":        "overlay2",
		"bip":                   netip.PrefixFrom(netip.AddrFrom4(first), 24).String(),
		"default-address-pools": []map[string]any{{"base": d.Pool.String(), "size": 24}},
		"dns":                   []string{d.Gateway.String()},
		"ipv6":                  false,
		"ip6tables":             false,
		"hosts":                 []string{"unix://" + RawSocket},
		"data-root":             DataDir,
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// Entrypoint is the sidecar's command: it refuses to start unless the
// cgroup namespace is private (every line of /proc/self/cgroup names the
// root, which is only true in a namespace of its own; in the host's
// namespace a SYS_ADMIN container can reach cgroup v1's release_agent and
// run code as host root), appends the vak CA to the system bundle (so
// pulls through the gateway verify), writes daemon.json, mounts a fresh
// cgroup2 hierarchy and execs dockerd. A non-empty guard command (an
// absolute path and its arguments, e.g. the vak binary and
// dockerguard.Args) is started in the background just before dockerd.
func (d Daemon) Entrypoint(trustCA string, guard ...string) ([]string, error) {
	return d.entrypoint(trustCA, true, guard...)
}

// entrypoint is Entrypoint; mountCgroup2 false leaves /sys/fs/cgroup as the
// runtime made it (Sysbox gives the container a writable cgroup view of
// its own, and dockerd runs on it as on a host).
func (d Daemon) entrypoint(trustCA string, mountCgroup2 bool, guard ...string) ([]string, error) {
	js, err := d.DaemonJSON()
	if err != nil {
		return nil, err
	}
	if !path.IsAbs(trustCA) {
		return nil, fmt.Errorf("dockerd: CA path %q must be absolute", trustCA)
	}
	startGuard := ":"
	if len(guard) > 0 {
		if !path.IsAbs(guard[0]) {
			return nil, fmt.Errorf("dockerd: guard command %q must be an absolute path", guard[0])
		}
		q := make([]string, len(guard))
		for i, a := range guard {
			q[i] = shq(a)
		}
		startGuard = strings.Join(q, " ") + " &"
	}
	mountCgroup := `mount -t cgroup2 none /sys/fs/cgroup`
	if !mountCgroup2 {
		mountCgroup = ":"
	}
	script := strings.Join([]string{
		`set -eu`,
		`if grep -qv ':/$' /proc/self/cgroup; then echo "vak-dockerd: refusing to start: the cgroup namespace is not private (/proc/self/cgroup: $(tr '\n' ' ' </proc/self/cgroup))" >&2; exit 78; fi`,
		`mkdir -p ` + path.Dir(CAStoreFile) + ` ` + path.Dir(DaemonConfig) + ` ` + RawSocketDir,
		`cp ` + shq(trustCA) + ` ` + CAStoreFile,
		// Appended to the bundle rather than update-ca-certificates, which
		// rehashes every certificate (0.5 s of CPU, 1.8 s under load: most
		// of the sidecar's start); once, whatever the restarts.
		`grep -qF "$(sed -n 2p ` + CAStoreFile + `)" ` + CABundle + ` || { cat ` + CAStoreFile + `; echo; } >>` + CABundle,
		`printf '%s\n' ` + shq(string(js)) + ` >` + DaemonConfig,
		mountCgroup,
		startGuard,
		`exec dockerd --config-file ` + DaemonConfig,
	}, "\n")
	return []string{"/bin/sh", "-c", script}, nil
}

// UnshareCgroup prefixes the entrypoint where the container runtime cannot
// be asked for a private cgroup namespace (Debian's docker-compose 1.29 has
// no `cgroup:` key): the entrypoint's process moves into a new cgroup
// namespace before the script's check runs, and docker exec (health
// checks) joins that namespace. If unshare fails the container exits; if
// it did not take effect the check refuses to start dockerd.
var UnshareCgroup = []string{"unshare", "--cgroup", "--"}

// ErrCgroupnsNotPrivate is returned when the sidecar would run, or runs, in
// a cgroup namespace that is not its own.
var ErrCgroupnsNotPrivate = errors.New("dockerd: the sidecar's cgroup namespace is not private")

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
