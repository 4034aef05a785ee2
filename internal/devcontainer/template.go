// Package devcontainer writes and runs vak's dev-container template: a
// compose project ("Reopen in Container" in VS Code, `devcontainer up` on
// the command line) with the proxied topology of internal/proxynet — the
// gateway, the netclient whose namespace the agent's container joins — and
// the agent's container itself. Nothing secret is written into the
// workspace: `vak devcontainer prepare` (the template's initializeCommand,
// run on the host before compose) places the gateway's config, CA and
// secrets in a named volume only the gateway mounts.
package devcontainer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"vak/internal/catrust"
	"vak/internal/dockerd"
	"vak/internal/dockerguard"
	"vak/internal/engine"
	"vak/internal/netfence"
	"vak/internal/proxynet"
)

// Files of the template, relative to the workspace.
const (
	Dir            = ".devcontainer"
	ConfigFile     = "devcontainer.json"
	ComposeFile    = "compose.yml"
	VSCodeDir      = ".vscode"
	NetImage       = proxynet.ImageRepo + ":devcontainer" // the alias prepare keeps on the current vak-net image
	DockerdImage   = dockerd.ImageRepo + ":devcontainer"  // the alias prepare keeps on the current sidecar image
	DefaultImage   = "debian:bookworm-slim"
	LabelKey       = "vak.devcontainer" // the workspace's key on every service, network and volume
	gatewayHostNum = 200                // the gateway's fixed address in the sandbox /24 (dynamic ones stay below 128)
)

// ErrExists reports a template that init would overwrite.
var ErrExists = errors.New("devcontainer: the workspace already has a dev-container config")

// ProtectedDirs are mounted read-only over the workspace in the agent's
// container: the template runs its initializeCommand on the host, so an
// agent that could edit it could run code outside the sandbox.
var ProtectedDirs = []string{Dir, VSCodeDir}

// Template describes a workspace's generated files.
type Template struct {
	Workspace string // canonical host path, mounted at the same path
	Image     string // the agent's image ("" = DefaultImage)
	Key       string // proxynet.Key(Workspace)
	// Placeholders maps secret names to their placeholders (public values
	// the gateway swaps for the real secret toward the secret's hosts).
	Placeholders map[string]string
	// GatewayNetworks are existing Docker networks the gateway also joins
	// (a corporate network; tests: the hermetic internet).
	GatewayNetworks []string
	// Labels are added to every service and network (tests: vak.test=1)
	// and passed to prepare for the volumes.
	Labels map[string]string
	// Vak is the command the host runs as initializeCommand ("" = "vak").
	Vak string
	// Env is plain (non-secret) environment for the agent's container
	// (sandcat's env with --from-sandcat).
	Env map[string]string
	// Protected are further workspace-relative paths mounted read-only in
	// the agent's container (those of the trusted config's protected list
	// that exist when init runs; ProtectedDirs always are).
	Protected []string
	// Pinned are workspace-relative directories bound onto themselves
	// read-write (mount points cannot be renamed or replaced).
	Pinned []string
	// Docker adds the nested Docker engine: a dockerd service (the
	// sidecar of sessions' --docker, dockerd.Sidecar.Spec) in the
	// netclient's namespace with vak's API guard in front of it, the
	// netclient in netfence nested mode, and DOCKER_HOST in the app.
	Docker bool
	// StateDir is vak's state dir on the host (Docker only: the seccomp
	// profile prepare writes there, SeccompFile).
	StateDir string
	// User is "UID:GID" the agent's container runs as (the workspace
	// owner's, WorkspaceUser), so what the agent writes is the user's and,
	// with every capability dropped, it can write the workspace at all;
	// HOME is then a private tmpfs (AppHome) owned by it. Empty: the
	// image's user (a workspace owned by root).
	User string
}

// AppHome is HOME in the agent's container when Template.User is set: a
// tmpfs owned by that user (the image has no home for an arbitrary uid).
const AppHome = "/home/vak"

// Paths of the --docker variant, the same in dockerd and the agent's
// container (so a bind of DOCKER_HOST's path is recognised by the guard).
const (
	// DockerDir holds the guard's sockets (a volume only dockerd and the
	// agent's container mount; the raw socket stays in
	// dockerd.RawSocketDir, a tmpfs of dockerd's own).
	DockerDir = "/run/vak/docker"
	// DockerSocket is the guarded Engine API socket (DOCKER_HOST).
	DockerSocket = DockerDir + "/docker.sock"
	// ReaperSocket is the guard's reaper-only socket.
	ReaperSocket = DockerDir + "/reaper.sock"
	// VakDir is where dockerd mounts the volume holding the static vak
	// binary (the guard and the health check).
	VakDir = "/opt/vak"
	// VakBinary is that binary.
	VakBinary = VakDir + "/vak"
)

// Pool is the --docker variant's inner address pool.
var Pool = netfence.DefaultNestedPool

// BinVolume holds the static vak binary for dockerd, DockerVolume dockerd's
// state (images survive a Rebuild and dockerd's recreation), SocketVolume
// the guard's sockets.
func BinVolume(key string) string    { return "vak-dc-" + key + "-bin" }
func DockerVolume(key string) string { return "vak-dc-" + key + "-dockerd" }
func SocketVolume(key string) string { return "vak-dc-" + key + "-docker-sock" }

// SeccompFile is where prepare writes dockerd's seccomp profile (in vak's
// state dir, not the workspace: the agent must not be able to widen it).
func SeccompFile(stateDir, key string) string {
	return filepath.Join(stateDir, "devcontainer", key, "dockerd-seccomp.json")
}

// ExistingProtected returns the entries of protected (workspace-relative)
// that exist in ws as files or directories (not links), for
// Template.Protected (a bind mount needs its source, and compose would
// create a missing one as a directory), and their parent directories inside
// the workspace, for Template.Pinned: a directory holding a mount point can
// still be renamed, and a renamed .git with a fresh .git in its place would
// undo the read-only .git/hooks.
func ExistingProtected(ws string, protected []string) (ro, pinned []string) {
	for _, p := range protected {
		clean := filepath.Clean(p)
		if filepath.IsAbs(clean) || clean == "." || strings.HasPrefix(clean, "..") || slices.Contains(ProtectedDirs, clean) {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(ws, clean)); err == nil && (fi.Mode().IsRegular() || fi.IsDir()) {
			ro = append(ro, clean)
			for d := filepath.Dir(clean); d != "."; d = filepath.Dir(d) {
				if fi, err := os.Lstat(filepath.Join(ws, d)); err == nil && fi.IsDir() && !slices.Contains(pinned, d) {
					pinned = append(pinned, d)
				}
			}
		}
	}
	slices.Sort(pinned)
	return ro, pinned
}

// Names of a workspace's volumes (external to the compose project: they
// outlive `docker-compose down`, and prepare fills them before `up`).
func GatewayVolume(key string) string { return "vak-dc-" + key + "-gateway" }
func TrustVolume(key string) string   { return "vak-dc-" + key + "-trust" }

// Subnet is the sandbox network's fixed /24 for key (fixed so that the
// netclient's command can name the gateway's address). prepare checks it
// overlaps no other Docker network.
func Subnet(key string) netip.Prefix {
	b, _ := strconv.ParseUint(key[:2], 16, 8)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 214, byte(b), 0}), 24)
}

// GatewayIP is the gateway's address on the sandbox network.
func GatewayIP(key string) netip.Addr {
	a := Subnet(key).Addr().As4()
	a[3] = gatewayHostNum
	return netip.AddrFrom4(a)
}

type healthcheck struct {
	Test     []string `json:"test"`
	Interval string   `json:"interval"`
	Timeout  string   `json:"timeout"`
	Retries  int      `json:"retries"`
}

type dependency struct {
	Condition string `json:"condition"`
}

type service struct {
	Image       string                 `json:"image"`
	Runtime     string                 `json:"runtime,omitempty"`
	User        string                 `json:"user,omitempty"`
	Command     []string               `json:"command,omitempty"`
	Environment []string               `json:"environment,omitempty"`
	WorkingDir  string                 `json:"working_dir,omitempty"`
	NetworkMode string                 `json:"network_mode,omitempty"`
	Networks    map[string]*serviceNet `json:"networks,omitempty"`
	DependsOn   map[string]dependency  `json:"depends_on,omitempty"`
	CapDrop     []string               `json:"cap_drop"`
	CapAdd      []string               `json:"cap_add,omitempty"`
	SecurityOpt []string               `json:"security_opt"`
	ReadOnly    bool                   `json:"read_only,omitempty"`
	Tmpfs       []string               `json:"tmpfs,omitempty"`
	Sysctls     map[string]string      `json:"sysctls,omitempty"`
	MemLimit    string                 `json:"mem_limit,omitempty"`
	PidsLimit   int                    `json:"pids_limit,omitempty"`
	Volumes     []string               `json:"volumes,omitempty"`
	Healthcheck *healthcheck           `json:"healthcheck,omitempty"`
	Entrypoint  []string               `json:"entrypoint,omitempty"`
	Restart     string                 `json:"restart,omitempty"`
	Labels      map[string]string      `json:"labels"`
	Init        bool                   `json:"init,omitempty"`
}

type serviceNet struct {
	IPv4Address string `json:"ipv4_address,omitempty"`
}

type ipamConfig struct {
	Subnet  string `json:"subnet"`
	IPRange string `json:"ip_range"`
}

type network struct {
	Internal   bool              `json:"internal,omitempty"`
	External   bool              `json:"external,omitempty"`
	Name       string            `json:"name,omitempty"`
	DriverOpts map[string]string `json:"driver_opts,omitempty"`
	IPAM       *struct {
		Config []ipamConfig `json:"config"`
	} `json:"ipam,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

type volume struct {
	External bool   `json:"external"`
	Name     string `json:"name"`
}

type composeProject struct {
	Version  string              `json:"version"`
	Services map[string]*service `json:"services"`
	Networks map[string]*network `json:"networks"`
	Volumes  map[string]*volume  `json:"volumes"`
}

func (t *Template) labels() map[string]string {
	l := map[string]string{LabelKey: t.Key}
	for k, v := range t.Labels {
		l[k] = v
	}
	return l
}

// Compose returns the compose project (format 2.4, with only keys that
// Debian's docker-compose 1.29 and Compose v2 both read: the same file
// works with either). JSON is YAML, so it is written as JSON under a
// comment header.
func (t *Template) Compose() ([]byte, error) {
	if t.Key == "" || !filepath.IsAbs(t.Workspace) {
		return nil, errors.New("devcontainer: template needs an absolute workspace and its key")
	}
	image := t.Image
	if image == "" {
		image = DefaultImage
	}
	gw := GatewayIP(t.Key)
	sub := Subnet(t.Key)
	rng := netip.PrefixFrom(sub.Addr(), 25)
	health := func(cmd []string) *healthcheck {
		return &healthcheck{Test: append([]string{"CMD"}, cmd...), Interval: "1s", Timeout: "5s", Retries: 3}
	}
	var pool netip.Prefix
	if t.Docker {
		pool = Pool
		if pool.Overlaps(sub) {
			return nil, fmt.Errorf("devcontainer: the inner pool %s overlaps the sandbox subnet %s", pool, sub)
		}
	}
	gwNets := map[string]*serviceNet{"egress": {}, "sandbox": {IPv4Address: gw.String()}}
	nets := map[string]*network{
		"egress": {Labels: t.labels()},
		"sandbox": {
			Internal: true, Labels: t.labels(),
			// No address of the host on this bridge: nothing but the
			// gateway is reachable from it, even with the rules flushed.
			DriverOpts: map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true"},
			IPAM: &struct {
				Config []ipamConfig `json:"config"`
			}{Config: []ipamConfig{{Subnet: sub.String(), IPRange: rng.String()}}},
		},
	}
	for i, n := range t.GatewayNetworks {
		alias := fmt.Sprintf("gateway-extra-%d", i)
		gwNets[alias] = &serviceNet{}
		nets[alias] = &network{External: true, Name: n}
	}
	env := catrust.Env(catrust.Dir)
	for _, name := range slices.Sorted(maps.Keys(t.Env)) {
		if _, ok := t.Placeholders[name]; ok || !validName(name) {
			return nil, fmt.Errorf("devcontainer: environment variable %q: not a name, or also a secret", name)
		}
		env = append(env, name+"="+t.Env[name])
	}
	for _, name := range slices.Sorted(maps.Keys(t.Placeholders)) {
		env = append(env, name+"="+t.Placeholders[name])
	}
	var appTmpfs []string
	if t.User != "" {
		uid, gid, ok := strings.Cut(t.User, ":")
		if !ok || !allDigits(uid) || !allDigits(gid) {
			return nil, fmt.Errorf("devcontainer: user %q: want UID:GID", t.User)
		}
		if _, set := t.Env["HOME"]; !set {
			env = append(env, "HOME="+AppHome)
		}
		appTmpfs = []string{AppHome + ":uid=" + uid + ",gid=" + gid + ",mode=0700"}
	}
	vols := []string{t.Workspace + ":" + t.Workspace}
	for _, d := range t.Pinned {
		p := filepath.Join(t.Workspace, d)
		vols = append(vols, p+":"+p)
	}
	for _, d := range append(slices.Clone(ProtectedDirs), t.Protected...) {
		p := filepath.Join(t.Workspace, d)
		vols = append(vols, p+":"+p+":ro")
	}
	vols = append(vols, "vak-trust:"+catrust.Dir+":ro")
	// dockerd sees the workspace as the agent does (inner binds resolve
	// there, so an inner container gets no more than the agent).
	dockerdVols := slices.Clone(vols)
	if t.Docker {
		// Read-only: connecting to a socket needs no write access, and an
		// agent that could replace reaper.sock with a link to the raw
		// socket would have dockerd bind that into an inner container.
		vols = append(vols, SocketVolume(t.Key)+":"+DockerDir+":ro")
		env = append(env, "DOCKER_HOST=unix://"+DockerSocket)
	}
	p := composeProject{
		Version: "2.4",
		Services: map[string]*service{
			"gateway": {
				Image: NetImage, User: "0:0",
				Command:     proxynet.GatewayCommand(t.Key),
				Environment: proxynet.GatewayEnv(),
				Networks:    gwNets,
				CapDrop:     []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"}, ReadOnly: true,
				Sysctls: map[string]string{
					"net.ipv4.ip_forward":                 "0",
					"net.ipv4.ip_unprivileged_port_start": "0",
				},
				MemLimit: "512m", PidsLimit: 512,
				Volumes:     []string{"vak-gateway:" + proxynet.GatewayDataDir},
				Healthcheck: health(proxynet.GatewayHealthCommand()),
				Restart:     "unless-stopped",
				Labels:      t.labels(),
			},
			"netclient": {
				Image: NetImage, User: "0:0",
				Command:   proxynet.NetclientCommand(gw, pool),
				Networks:  map[string]*serviceNet{"sandbox": {}},
				DependsOn: map[string]dependency{"gateway": {Condition: "service_healthy"}},
				CapDrop:   []string{"ALL"}, CapAdd: []string{"NET_ADMIN"},
				SecurityOpt: []string{"no-new-privileges"}, ReadOnly: true,
				Tmpfs:    []string{"/run:rw,nosuid,nodev,noexec,size=1m"},
				Sysctls:  netfence.Sysctls,
				MemLimit: "128m", PidsLimit: 128,
				Healthcheck: health(proxynet.NetclientHealthCommand(gw, pool)),
				Labels:      t.labels(),
			},
			"app": {
				Image: image,
				// Its own long-running command (works with
				// overrideCommand false, as JetBrains runs it).
				Command:     []string{"sleep", "infinity"},
				Init:        true,
				Environment: env,
				WorkingDir:  t.Workspace,
				NetworkMode: "service:netclient",
				DependsOn:   map[string]dependency{"netclient": {Condition: "service_healthy"}},
				CapDrop:     []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"},
				User:    t.User,
				Tmpfs:   appTmpfs,
				Volumes: vols,
				Labels:  t.labels(),
			},
		},
		Networks: nets,
		Volumes: map[string]*volume{
			"vak-gateway": {External: true, Name: GatewayVolume(t.Key)},
			"vak-trust":   {External: true, Name: TrustVolume(t.Key)},
		},
	}
	if t.Docker {
		d, err := t.dockerdService(gw, pool, dockerdVols)
		if err != nil {
			return nil, err
		}
		p.Services["dockerd"] = d
		p.Services["app"].DependsOn = map[string]dependency{"dockerd": {Condition: "service_healthy"}}
		for _, v := range []string{BinVolume(t.Key), DockerVolume(t.Key), SocketVolume(t.Key)} {
			p.Volumes[v] = &volume{External: true, Name: v}
		}
	}
	for _, svc := range p.Services {
		// Every service names its runtime (the sidecar's, runc
		// otherwise), as every container vak creates does: never the
		// Engine's default (engine.DefaultRuntime).
		svc.Runtime = cmp.Or(svc.Runtime, engine.DefaultRuntime)
		// Compose interpolates ${VAR} in every value; none is meant, so
		// each $ is escaped ($$).
		for _, l := range [][]string{svc.Command, svc.Entrypoint, svc.Environment} {
			escapeDollar(l)
		}
		if svc.Healthcheck != nil {
			escapeDollar(svc.Healthcheck.Test)
		}
	}
	var b bytes.Buffer
	b.WriteString("# Generated by `vak devcontainer init` (see docs/devcontainer.md). No secret\n# is written here: the gateway's config comes from the host's trusted\n# config, placed by `vak devcontainer prepare` (the initializeCommand).\n")
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// DevcontainerJSON returns devcontainer.json.
func (t *Template) DevcontainerJSON() ([]byte, error) {
	vak := t.Vak
	if vak == "" {
		vak = "vak"
	}
	prep := []string{vak, "devcontainer", "prepare", "--workspace", t.Workspace}
	for _, k := range slices.Sorted(maps.Keys(t.Labels)) {
		prep = append(prep, "--label", k+"="+t.Labels[k])
	}
	cfg := struct {
		Name              string   `json:"name"`
		DockerComposeFile []string `json:"dockerComposeFile"`
		Service           string   `json:"service"`
		RunServices       []string `json:"runServices"`
		WorkspaceFolder   string   `json:"workspaceFolder"`
		InitializeCommand []string `json:"initializeCommand"`
		OverrideCommand   bool     `json:"overrideCommand"`
	}{
		Name:              "vak: " + filepath.Base(t.Workspace),
		DockerComposeFile: []string{ComposeFile},
		Service:           "app",
		RunServices:       t.services(),
		WorkspaceFolder:   t.Workspace,
		InitializeCommand: prep,
		OverrideCommand:   false,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cfg); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// services are the template's services, in start order.
func (t *Template) services() []string {
	if t.Docker {
		return []string{"gateway", "netclient", "dockerd", "app"}
	}
	return []string{"gateway", "netclient", "app"}
}

// dockerdService is the nested engine, derived from dockerd.Sidecar.Spec
// (the same capabilities, seccomp profile, limits and entrypoint as a
// session's sidecar) and translated to compose: the seccomp profile by
// path (SeccompFile), mounts by volume name, and the entrypoint prefixed
// with dockerd.UnshareCgroup: Debian's compose 1.29 cannot ask for a
// private cgroup namespace (it rejects Compose v2's `cgroup: private`), so
// the entrypoint creates one and verifies it, refusing to start dockerd
// otherwise. One file then works with both composes (the dev-containers
// CLI and VS Code pick Compose v2 when `docker compose` works, else
// docker-compose), and under both dockerd runs in a cgroup namespace of its
// own.
func (t *Template) dockerdService(gw netip.Addr, pool netip.Prefix, vols []string) (*service, error) {
	if !filepath.IsAbs(t.StateDir) {
		return nil, errors.New("devcontainer: the --docker template needs vak's state dir (the seccomp profile)")
	}
	policy := dockerguard.Policy{
		Workspace: t.Workspace, TrustDir: catrust.Dir, TrustEnv: catrust.Env(catrust.Dir),
		Pool: pool, DNS: gw, Labels: map[string]string{LabelKey: t.Key},
		GuardSocket: DockerSocket, ReaperSocket: ReaperSocket,
		// Workspace bind sources are staged on the sidecar's private
		// tmpfs, so a source swapped for a symlink after the check is
		// not followed (as in sessions: taskenv.StageDir).
		StageDir: dockerd.RawSocketDir + "/binds",
	}
	s := dockerd.Sidecar{
		Name: "dockerd", Image: DockerdImage, NetworkMode: "container:netclient",
		Daemon:      dockerd.Daemon{Pool: pool, Gateway: gw},
		TrustCA:     catrust.Dir + "/" + catrust.CAFile,
		DataVolume:  DockerVolume(t.Key),
		Guard:       append([]string{VakBinary}, dockerguard.Args(policy, dockerd.RawSocket)...),
		GuardSocket: DockerSocket,
	}
	cfg, host, err := s.Spec()
	if err != nil {
		return nil, err
	}
	var secOpt []string
	for _, o := range host.SecurityOpt {
		if strings.HasPrefix(o, "seccomp=") {
			o = "seccomp:" + SeccompFile(t.StateDir, t.Key)
		}
		secOpt = append(secOpt, o)
	}
	var tmpfs []string
	for _, dir := range slices.Sorted(maps.Keys(host.Tmpfs)) {
		tmpfs = append(tmpfs, dir+":"+host.Tmpfs[dir])
	}
	var mounts []string
	for _, m := range host.Mounts {
		mounts = append(mounts, m.Source+":"+m.Target)
	}
	mounts = append(mounts, vols...)
	mounts = append(mounts, BinVolume(t.Key)+":"+VakDir+":ro", SocketVolume(t.Key)+":"+DockerDir)
	check := strings.Join(append(shellQuote(proxynet.JoinedHealthCommand(VakBinary, gw, pool)),
		"&&", "docker", "-H", "unix://"+DockerSocket, "version", "--format", "'{{.Server.Version}}'", ">/dev/null"), " ")
	if !host.CgroupnsMode.IsPrivate() {
		return nil, errors.New("devcontainer: the sidecar's spec has no private cgroup namespace")
	}
	return &service{
		Image: cfg.Image, User: cfg.User, Runtime: host.Runtime,
		Entrypoint:  append(slices.Clone(dockerd.UnshareCgroup), cfg.Entrypoint...),
		Command:     cfg.Cmd,
		NetworkMode: "service:netclient",
		DependsOn:   map[string]dependency{"netclient": {Condition: "service_healthy"}},
		CapDrop:     host.CapDrop, CapAdd: host.CapAdd,
		SecurityOpt: secOpt,
		Tmpfs:       tmpfs,
		MemLimit:    strconv.FormatInt(host.Memory, 10),
		PidsLimit:   int(*host.PidsLimit),
		Volumes:     mounts,
		Healthcheck: &healthcheck{Test: []string{"CMD-SHELL", check}, Interval: "2s", Timeout: "10s", Retries: 3},
		Labels:      t.labels(),
	}, nil
}

func escapeDollar(l []string) {
	for i := range l {
		l[i] = strings.ReplaceAll(l[i], "$", "$$")
	}
}

func shellQuote(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return q
}

// Write writes the template into the workspace (and creates .vscode, so
// that its read-only mount has a source). Without force an existing
// devcontainer.json or compose.yml is an error naming it.
func (t *Template) Write(force bool) ([]string, error) {
	dir := filepath.Join(t.Workspace, Dir)
	files := map[string]func() ([]byte, error){ConfigFile: t.DevcontainerJSON, ComposeFile: t.Compose}
	if !force {
		for _, name := range []string{ConfigFile, ComposeFile} {
			if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
				return nil, fmt.Errorf("%w: %s (use --force to overwrite)", ErrExists, filepath.Join(dir, name))
			}
		}
	}
	for _, d := range ProtectedDirs {
		if err := os.MkdirAll(filepath.Join(t.Workspace, d), 0o755); err != nil {
			return nil, fmt.Errorf("devcontainer: %w", err)
		}
	}
	var written []string
	for _, name := range []string{ConfigFile, ComposeFile} {
		data, err := files[name]()
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p+".tmp", data, 0o644); err != nil {
			return nil, fmt.Errorf("devcontainer: %w", err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return nil, fmt.Errorf("devcontainer: %w", err)
		}
		written = append(written, p)
	}
	return written, nil
}

// PlaceholderFile keeps a workspace's placeholders in vak's host state
// dir: init writes them into the template, prepare seeds the gateway with
// the same ones.
func PlaceholderFile(stateDir, key string) string {
	return filepath.Join(stateDir, "devcontainer", key, "placeholders.json")
}

// validName reports whether s is usable as an environment variable name.
func validName(s string) bool {
	if s == "" || strings.ContainsAny(s[:1], "0123456789") {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
