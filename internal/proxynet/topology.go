package proxynet

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	toml "github.com/pelletier/go-toml/v2"

	"vak/internal/catrust"
	"vak/internal/egress/ca"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/logins"
	"vak/internal/engine"
	"vak/internal/netfence"
	"vak/internal/paths"
	"vak/internal/receipts"
	"vak/internal/sandbox"
	"vak/internal/trace"
)

// Labels of proxied-network resources (besides engine's LabelManaged,
// LabelKind, LabelWorkspace and LabelOwner).
const (
	LabelKey      = "vak.proxynet"      // the topology key on its resources
	LabelClientOf = "vak.proxynet.user" // the topology key on sandbox containers that use it
	KindProxynet  = "proxynet"          // engine.LabelKind on every resource of a topology
)

// In-container paths of the gateway.
const (
	gatewayData     = "/data" // the gateway's volume (state, config, CA key, receipts)
	gatewayConfig   = gatewayData + "/gateway.toml"
	gatewayStateDir = gatewayData + "/vak" // $XDG_STATE_HOME/vak
)

// Ports the gateway serves on the sandbox network.
const (
	ProxyPort       = netfence.DefaultProxyPort
	TransparentPort = netfence.DefaultTransparentPort
	DNSPort         = netfence.DefaultDNSPort
)

// DefaultReadyTimeout bounds how long the gateway and netclient may take to
// become healthy.
const DefaultReadyTimeout = 60 * time.Second

// ErrNoPolicy reports a proxied network requested without a [network]
// policy in the trusted config.
var ErrNoPolicy = errors.New("proxynet: the proxied network needs [network] rules or presets in the user config")

// Options configure a workspace's topology.
type Options struct {
	Engine    *client.Client
	Workspace string // canonical
	// Binary is the static Linux vak that the image is built from.
	Binary string
	// Sections are [network], [gateway] and [secrets] of the trusted config,
	// as config decoded them (config.Config.EgressSections); ConfigFile
	// names their file in errors. proxynet never reads a config file.
	Sections   *egressconfig.Sections
	ConfigFile string
	// StateDir is vak's host state dir (installation CA, trust files,
	// copied receipts).
	StateDir string
	// LoginStore is the host's login store (`vak login import`'s): the
	// tokens of the configured [logins] in it, and the logins removed from
	// it, go into the gateway's volume (logins.ImportFile), which the
	// gateway merges into its own store. Empty: none.
	LoginStore string
	// Labels are added to every resource (tests: vak.test=1).
	Labels map[string]string
	// Progress receives image-build and set-up progress (may be nil).
	Progress io.Writer
	// Getenv reads env-sourced secrets for the gateway; nil means os.Getenv.
	Getenv func(string) string
	// HostRootsFile is the host's system root bundle, copied into the
	// gateway's trust for upstream TLS; empty means the first of
	// SystemRootFiles that exists.
	HostRootsFile string
	// VerifyInterval is how often the netclient re-verifies its rules (and
	// exits if they changed); zero means its default.
	VerifyInterval time.Duration
	// NestedPool, when valid, builds the topology in netfence nested mode
	// (`vak netclient --nested-pool`): a nested Docker engine may run in the
	// netclient's namespace and its containers' traffic is fenced too. The
	// pool must not overlap the sandbox or egress networks. A running
	// topology without nested mode is not reused for such a caller (it is
	// rebuilt, or refused with ErrInUse while sandboxes still use it); a
	// nested-mode topology serves plain callers as well.
	NestedPool netip.Prefix

	// extraFiles are added to the gateway payload (GatewayPayload).
	extraFiles map[string][]byte
}

// Net is a running topology, ready for sandbox containers to join.
type Net struct {
	Key       string
	Gateway   string // gateway container name
	Netclient string // netclient container name (join with container:NAME)
	// NetclientID is the netclient's container ID (a rebuilt topology has
	// another).
	NetclientID string
	GatewayIP   netip.Addr
	// HostTrustDir is the host directory of public trust files to mount
	// read-only at catrust.Dir inside sandbox containers.
	HostTrustDir string
	// Env is what sandbox containers get: trust variables and the secret
	// placeholders (never real values).
	Env []string
	// Placeholders maps secret names to their placeholders.
	Placeholders map[string]string
	// NestedPool is the netclient's nested pool when the caller asked for
	// nested mode (Options.NestedPool).
	NestedPool netip.Prefix

	lease *Lease // the caller's hold on the topology (Release)
}

// Release lets go of the caller's hold on the topology (lease.go): call it
// once the sandbox containers that use it exist (they keep it from then
// on), or when they are gone. Until then no Teardown or GC removes the
// topology. It may be called more than once.
func (n *Net) Release() { n.lease.Release() }

// Key derives the topology key from the invoking user and the workspace:
// two users never share (or tear down) each other's topology.
func Key(workspace string) string {
	sum := sha256.Sum256([]byte(strconv.Itoa(os.Getuid()) + "\x00" + workspace))
	return hex.EncodeToString(sum[:6])
}

// owner is the value of engine.LabelOwner on the caller's topologies.
func owner() string { return strconv.Itoa(os.Getuid()) }

// Names of a topology's resources.
func names(key string) (egressNet, sandboxNet, gw, nc, vol string) {
	return "vak-egress-" + key, "vak-sandbox-" + key, "vak-gw-" + key, "vak-nc-" + key, "vak-gw-" + key
}

// NetworkMode is what a sandbox container sets to join the topology.
func (n *Net) NetworkMode() string { return "container:" + n.Netclient }

// Mounts are the read-only trust files for a sandbox container (bind spec).
func (n *Net) Bind() string { return n.HostTrustDir + ":" + catrust.Dir + ":ro" }

func (o *Options) labels(key string) map[string]string {
	l := map[string]string{engine.LabelManaged: "true", engine.LabelKind: KindProxynet, LabelKey: key, engine.LabelWorkspace: o.Workspace, engine.LabelOwner: owner()}
	for k, v := range o.Labels {
		l[k] = v
	}
	return l
}

func (o *Options) progressf(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "vak: "+format+"\n", a...)
	}
}

// Ensure returns the workspace's running topology, creating it if needed:
// egress network and gateway first, then the sandbox network and the
// netclient, which must report its rules verified before anything joins it.
// A second caller for the same workspace reuses the running gateway. The
// returned Net holds the topology's lease (lease.go) until Release: no
// removal takes the topology before the caller's sandbox containers use
// it. Ensure waits while a removal of the topology or another caller's
// Ensure is under way.
func Ensure(ctx context.Context, o Options) (*Net, error) {
	if o.Engine == nil || o.Workspace == "" || o.StateDir == "" {
		return nil, errors.New("proxynet: Engine, Workspace and StateDir are required")
	}
	tr := trace.From(ctx)
	end := tr.Begin("proxied network: gateway sections")
	sections, err := gatewaySections(o.ConfigFile, o.Sections)
	end()
	if err != nil {
		return nil, err
	}
	key := Key(o.Workspace)
	end = tr.Begin("proxied network: lease")
	change, err := lockChange(ctx, o.StateDir, key, true)
	var lease *Lease
	if err == nil {
		if lease, err = holdLease(ctx, o.StateDir, key); err != nil {
			change.Close()
		}
	}
	end()
	if err != nil {
		return nil, err
	}
	defer change.Close()
	n, err := o.ensure(ctx, key, sections, lease)
	if err != nil {
		lease.Release()
		return nil, err
	}
	n.lease = lease
	return n, nil
}

// ensure is Ensure with the change lock and the lease held.
func (o *Options) ensure(ctx context.Context, key string, sections *egressconfig.Sections, lease *Lease) (*Net, error) {
	n, why := o.reuse(ctx, key, sections)
	if why == nil || errors.Is(why, ErrFenceSelfTest) {
		return n, why
	}
	// Sandboxes still joined: bring the gateway back in place, never
	// rebuild under them (that would cut them off for good).
	if users, err := liveUsers(ctx, o.Engine, key); err != nil {
		return nil, fmt.Errorf("proxynet: list users: %w", err)
	} else if len(users) > 0 {
		n, err := o.recover(ctx, key, sections)
		if err == nil || errors.Is(err, ErrFenceSelfTest) {
			return n, err
		}
		return nil, fmt.Errorf("%w: %s: %v; %d sandbox(es) still use it (%s): end them (vak session rm, vak gc) and retry", ErrInUse, o.Workspace, err, len(users), strings.Join(users, ", "))
	}
	// Nor under the commands that hold it (one about to start its sandbox,
	// a run whose command runs): wait until they let go.
	if err := lease.exclusive(ctx); err != nil {
		return nil, fmt.Errorf("%w: %s: the proxied network must be built again (%v), and other vak commands still use it: retry when they have ended (%v)", ErrInUse, o.Workspace, why, err)
	}
	// Whatever is left of a half-built topology goes first; what cannot go
	// fails the command (a network created again next to one that is
	// left would be a second of the same name).
	if err := removeTopology(ctx, o.Engine, key); err != nil {
		return nil, fmt.Errorf("proxynet: remove what is left of the proxied network of %s: %w", o.Workspace, err)
	}
	n, err := o.build(ctx, key, sections)
	if err != nil {
		return nil, err
	}
	if err := lease.shared(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// build creates key's topology from nothing (see Ensure); on failure it
// removes what it made.
func (o *Options) build(ctx context.Context, key string, sections *egressconfig.Sections) (_ *Net, err error) {
	image, err := EnsureImage(ctx, o.Engine, o.Binary, o.Progress)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			removeTopology(context.Background(), o.Engine, key)
		}
	}()
	o.progressf("starting the egress gateway for %s", o.Workspace)
	if err := o.createNetworks(ctx, key); err != nil {
		return nil, err
	}
	gwIP, payload, err := o.startGateway(ctx, key, image, sections)
	if err != nil {
		return nil, err
	}
	o.progressf("starting the netclient (gateway %v)", gwIP)
	if err := o.startNetclient(ctx, key, image, gwIP); err != nil {
		return nil, err
	}
	// Prove the fence before anything joins it.
	if err := o.selfTest(ctx, key, gwIP, sections); err != nil {
		return nil, err
	}
	_, _, gwName, _, _ := names(key)
	if start, err := gatewayStart(ctx, o.Engine, gwName); err == nil {
		markSelfTest(o.StateDir, key, start)
	}
	writeConfigDigest(o.StateDir, key, payload)
	n, err := o.describe(ctx, key, gwIP)
	if err != nil {
		return nil, err
	}
	o.progressf("proxied network ready")
	return n, nil
}

// createNetworks creates key's egress and sandbox networks and the
// gateway's volume.
func (o *Options) createNetworks(ctx context.Context, key string) error {
	egressNet, sandboxNet, _, _, vol := names(key)
	cli, labels := o.Engine, o.labels(key)
	if _, err := cli.NetworkCreate(ctx, egressNet, client.NetworkCreateOptions{Driver: "bridge", Labels: labels}); err != nil {
		return fmt.Errorf("proxynet: create %s: %w", egressNet, err)
	}
	if _, err := cli.NetworkCreate(ctx, sandboxNet, client.NetworkCreateOptions{
		Driver: "bridge", Internal: true, Labels: labels,
		// No address of the host on this bridge: nothing but the gateway
		// is reachable from it, even with the netclient's rules flushed.
		Options: map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true"},
	}); err != nil {
		return fmt.Errorf("proxynet: create %s: %w", sandboxNet, err)
	}
	if err := o.checkPool(ctx, egressNet, sandboxNet); err != nil {
		return err
	}
	if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: vol, Labels: labels}); err != nil {
		return fmt.Errorf("proxynet: create volume %s: %w", vol, err)
	}
	return nil
}

// healthCheck is the health check of a topology container.
func healthCheck(cmd ...string) *container.HealthConfig {
	return &container.HealthConfig{Test: append([]string{"CMD"}, cmd...), Interval: 250 * time.Millisecond, Timeout: 5 * time.Second, Retries: 3}
}

// startGateway creates and starts key's gateway and returns its address on
// the sandbox network and the payload it was given. Its config, the
// installation CA and secret files go into its own volume, which no
// sandbox container ever mounts.
func (o *Options) startGateway(ctx context.Context, key, image string, sections *egressconfig.Sections) (netip.Addr, []byte, error) {
	egressNet, sandboxNet, gwName, _, vol := names(key)
	cli := o.Engine
	payload, env, err := o.gatewayPayload(sections)
	if err != nil {
		return netip.Addr{}, nil, err
	}
	gwCfg := &container.Config{
		Image: image, User: "0:0", Labels: o.labels(key), Env: env,
		Cmd:         GatewayCommand(key),
		Healthcheck: healthCheck(GatewayHealthCommand()...),
	}
	gwHost := &container.HostConfig{
		NetworkMode:    container.NetworkMode(egressNet),
		Runtime:        engine.DefaultRuntime,
		Mounts:         []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: gatewayData}},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Sysctls: map[string]string{
			"net.ipv4.ip_forward":                 "0", // never route between the networks
			"net.ipv4.ip_unprivileged_port_start": "0", // DNS on 53 without capabilities
		},
		Resources: container.Resources{Memory: 512 << 20, PidsLimit: ptr(int64(512))},
	}
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: gwName, Config: gwCfg, HostConfig: gwHost})
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("proxynet: create gateway: %w", err)
	}
	if _, err := cli.CopyToContainer(ctx, res.ID, client.CopyToContainerOptions{DestinationPath: gatewayData, Content: bytes.NewReader(payload)}); err != nil {
		return netip.Addr{}, nil, fmt.Errorf("proxynet: give the gateway its config: %w", err)
	}
	if _, err := cli.NetworkConnect(ctx, sandboxNet, client.NetworkConnectOptions{Container: res.ID}); err != nil {
		return netip.Addr{}, nil, fmt.Errorf("proxynet: attach the gateway to %s: %w", sandboxNet, err)
	}
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return netip.Addr{}, nil, fmt.Errorf("proxynet: start gateway: %w", err)
	}
	if err := waitHealthy(ctx, cli, gwName); err != nil {
		return netip.Addr{}, nil, fmt.Errorf("proxynet: gateway: %w", err)
	}
	gwIP, err := addressOn(ctx, cli, gwName, sandboxNet)
	return gwIP, payload, err
}

// startNetclient creates and starts key's netclient, fenced toward the
// gateway at gwIP, and waits until it reports its rules verified.
func (o *Options) startNetclient(ctx context.Context, key, image string, gwIP netip.Addr) error {
	_, sandboxNet, _, ncName, _ := names(key)
	cli := o.Engine
	ncCfg := &container.Config{
		Image: image, User: "0:0", Labels: o.labels(key),
		Cmd:         o.netclientCmd(gwIP),
		Healthcheck: healthCheck(append([]string{"/vak", "netclient", "--check"}, o.fenceFlags(gwIP)...)...),
	}
	ncHost := &container.HostConfig{
		NetworkMode:    container.NetworkMode(sandboxNet),
		Runtime:        engine.DefaultRuntime, // the fence is nftables rules in this namespace
		CapDrop:        []string{"ALL"},
		CapAdd:         []string{"NET_ADMIN"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/run": "rw,nosuid,nodev,noexec,size=1m"},
		Sysctls:        netfence.Sysctls,
		Resources:      container.Resources{Memory: 128 << 20, PidsLimit: ptr(int64(128))},
	}
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: ncName, Config: ncCfg, HostConfig: ncHost})
	if err != nil {
		return fmt.Errorf("proxynet: create netclient: %w", err)
	}
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("proxynet: start netclient: %w", err)
	}
	if err := waitHealthy(ctx, cli, ncName); err != nil {
		return fmt.Errorf("proxynet: netclient: %w", err)
	}
	return nil
}

// reuse returns the running topology of key if both containers are
// healthy. A gateway that (re)started since the last passed self-test is
// tested again; if that fails, the topology is torn down and the error is
// ErrFenceSelfTest.
func (o *Options) reuse(ctx context.Context, key string, sections *egressconfig.Sections) (*Net, error) {
	_, sandboxNet, gwName, ncName, _ := names(key)
	tr := trace.From(ctx)
	// One inspect of each container, at once: everything below is read
	// from them (a create that reuses a topology pays two round trips to
	// the daemon here, not eight in a row).
	end := tr.Begin("proxied network: reuse: inspect")
	var (
		gw, nc       client.ContainerInspectResult
		gwErr, ncErr error
		wg           sync.WaitGroup
	)
	wg.Go(func() { gw, gwErr = o.Engine.ContainerInspect(ctx, gwName, client.ContainerInspectOptions{}) })
	wg.Go(func() { nc, ncErr = o.Engine.ContainerInspect(ctx, ncName, client.ContainerInspectOptions{}) })
	wg.Wait()
	end()
	if gwErr != nil || ncErr != nil || !isHealthy(gw) || !isHealthy(nc) {
		return nil, errors.New("not running")
	}
	if gw.Container.Config == nil || gw.Container.Config.Labels[engine.LabelOwner] != owner() {
		return nil, errors.New("not the caller's")
	}
	if o.NestedPool.IsValid() {
		if got := NestedPoolOf(nc.Container.Config); got != o.NestedPool {
			return nil, fmt.Errorf("the running netclient's nested pool is %v, need %v (nested Docker)", got, o.NestedPool)
		}
	}
	gwIP, err := addressIn(gw, gwName, sandboxNet)
	if err != nil {
		return nil, err
	}
	start := startOf(gw)
	end = tr.Begin("proxied network: reuse: refresh")
	changed, err := o.refresh(ctx, key, sections)
	end()
	if err != nil {
		return nil, err
	}
	if changed || !selfTested(o.StateDir, key, start) {
		if err := o.selfTest(ctx, key, gwIP, sections); err != nil {
			saveReceipts(context.Background(), o.Engine, o.StateDir, key)
			removeTopology(context.Background(), o.Engine, key)
			return nil, err
		}
		markSelfTest(o.StateDir, key, start)
	}
	defer tr.Begin("proxied network: reuse: describe")()
	// A reload (refresh) does not restart the gateway: start still names it.
	return o.describeRunning(ctx, key, gwIP, start, nc.Container.ID)
}

// describe finishes a Net: trust files on the host and the placeholders.
func (o *Options) describe(ctx context.Context, key string, gwIP netip.Addr) (*Net, error) {
	_, _, gwName, ncName, _ := names(key)
	start, err := gatewayStart(ctx, o.Engine, gwName)
	if err != nil {
		return nil, fmt.Errorf("proxynet: read placeholders: %w", err)
	}
	ncID := ""
	if ins, err := o.Engine.ContainerInspect(ctx, ncName, client.ContainerInspectOptions{}); err == nil {
		ncID = ins.Container.ID
	}
	return o.describeRunning(ctx, key, gwIP, start, ncID)
}

// describeRunning is describe for a gateway whose start (gatewayStart) and
// netclient's container ID are known.
func (o *Options) describeRunning(ctx context.Context, key string, gwIP netip.Addr, gwStart, ncID string) (*Net, error) {
	_, _, gwName, ncName, _ := names(key)
	auth, err := ca.LoadOrCreate(paths.GatewayCADir(o.StateDir))
	if err != nil {
		return nil, fmt.Errorf("proxynet: installation CA: %w", err)
	}
	trustDir := filepath.Join(o.StateDir, "proxynet", key, "trust")
	if err := WriteTrust(trustDir, auth.CertPEM(), SystemRoots()); err != nil {
		return nil, err
	}
	out, err := o.gatewayEnv(ctx, key, gwName, gwStart)
	if err != nil {
		return nil, fmt.Errorf("proxynet: read placeholders: %w", err)
	}
	n := &Net{Key: key, Gateway: gwName, Netclient: ncName, GatewayIP: gwIP, HostTrustDir: trustDir, Placeholders: map[string]string{}, NestedPool: o.NestedPool, NetclientID: ncID}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok && k != "" {
			n.Placeholders[k] = v
		}
	}
	n.Env = SandboxEnv(catrust.Dir, n.Placeholders)
	return n, nil
}

// gatewayEnv returns the running gateway's `vak gateway env` (its
// placeholders). They change only when the gateway starts again or loads a
// new configuration, so the answer is kept in the state dir keyed by the
// gateway's start (gatewayStart) and the digest of the configuration it was
// last given: a warm run then reads a file instead of paying a docker exec.
func (o *Options) gatewayEnv(ctx context.Context, key, gwName, start string) (string, error) {
	conf, _ := os.ReadFile(configDigestFile(o.StateDir, key))
	stamp := start + "\n" + strings.TrimSpace(string(conf)) + "\n"
	cache := filepath.Join(o.StateDir, "proxynet", key, "gateway-env")
	if b, err := os.ReadFile(cache); err == nil && strings.HasPrefix(string(b), stamp) {
		return strings.TrimPrefix(string(b), stamp), nil
	}
	var out, errb strings.Builder
	if err := engine.Exec(ctx, o.Engine, gwName, &out, &errb, "/vak", "gateway", "env", "--socket", paths.GatewayAdminSocket(gatewayStateDir)); err != nil {
		return "", fmt.Errorf("proxynet: gateway env: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	if err := os.MkdirAll(filepath.Dir(cache), 0o700); err == nil {
		tmp := cache + ".tmp"
		if os.WriteFile(tmp, []byte(stamp+out.String()), 0o600) == nil {
			os.Rename(tmp, cache)
		}
	}
	return out.String(), nil
}

// gatewaySections checks that the decoded [network], [gateway] and
// [secrets] of the trusted config hold a policy and were validated (once,
// by the config's loader: egressconfig.Sections.Validated); proxynet never
// validates them again.
func gatewaySections(file string, s *egressconfig.Sections) (*egressconfig.Sections, error) {
	if s == nil || s.Network == nil || len(s.Network.Rules)+len(s.Network.Presets) == 0 {
		return nil, fmt.Errorf("%w (%s has none)", ErrNoPolicy, file)
	}
	if _, err := s.Validated(); err != nil {
		return nil, fmt.Errorf("proxynet: the gateway sections of %s: %w", file, err)
	}
	return s, nil
}

// gatewayPayload builds the tar unpacked into the gateway's volume: the
// standalone gateway config (host file paths rewritten to copies inside the
// volume), the installation CA and secret files (env-sourced secrets too).
// It returns the container environment, which holds no secret.
func (o *Options) gatewayPayload(s *egressconfig.Sections) ([]byte, []string, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	cp := *s
	files := map[string][]byte{}
	env := GatewayEnv()
	if cp.Gateway == nil {
		cp.Gateway = &egressconfig.Gateway{}
	}
	{
		g := *cp.Gateway
		// Listeners and paths are the container's, set by flags.
		g.Listen, g.TransparentListen, g.DNSListen, g.AdminSocket, g.Receipts = nil, nil, nil, nil, nil
		var bundles []string
		for i, b := range g.ExtraCABundles {
			data, err := os.ReadFile(b)
			if err != nil {
				return nil, nil, fmt.Errorf("proxynet: gateway.extra_ca_bundles[%d]: %w", i, err)
			}
			name := fmt.Sprintf("ca-bundles/%d.pem", i)
			files[name] = data
			bundles = append(bundles, gatewayData+"/"+name)
		}
		// The host's system bundle (corporate and proxy CAs live there):
		// the gateway image has none of its own.
		if data, _ := hostRoots(o.HostRootsFile); data != nil {
			files[hostRootsName] = data
			bundles = append(bundles, gatewayData+"/"+hostRootsName)
		}
		g.ExtraCABundles = bundles
		cp.Gateway = &g
	}
	if len(cp.Secrets) > 0 {
		cp.Secrets = map[string]*egressconfig.Secret{}
		for name, sec := range s.Secrets {
			c := *sec
			switch {
			case sec.File != nil:
				data, err := os.ReadFile(*sec.File)
				if err != nil {
					return nil, nil, fmt.Errorf("proxynet: secrets.%s.file: %w", name, err)
				}
				p := gatewayData + "/secrets/" + name
				files["secrets/"+name] = data
				c.File = &p
			case sec.Env != nil:
				// Read here, handed over as a file in the gateway's own
				// volume (0600, the gateway's user), never as container
				// environment, which `docker inspect` and /proc/1/environ
				// would show.
				v := getenv(*sec.Env)
				if v == "" {
					return nil, nil, fmt.Errorf("proxynet: secrets.%s: environment variable %s is not set", name, *sec.Env)
				}
				p := gatewayData + "/secrets/" + name
				files["secrets/"+name] = []byte(v)
				c.Env, c.File = nil, &p
			}
			cp.Secrets[name] = &c
		}
	}
	cfg, err := toml.Marshal(cp)
	if err != nil {
		return nil, nil, fmt.Errorf("proxynet: encode gateway config: %w", err)
	}
	if o.LoginStore != "" && len(cp.Logins) > 0 {
		st, err := logins.OpenStore(o.LoginStore)
		if err != nil {
			return nil, nil, fmt.Errorf("proxynet: %w", err)
		}
		data, err := st.Export(slices.Sorted(maps.Keys(cp.Logins)))
		if err != nil {
			return nil, nil, fmt.Errorf("proxynet: %w", err)
		}
		if data != nil {
			files["vak/"+logins.ImportFile] = data
		}
	}
	maps.Copy(files, o.extraFiles)
	files["gateway.toml"] = cfg
	// The installation CA: key and certificate (the key stays in this
	// volume and in vak's host state dir, nowhere a sandbox can read).
	caDir := paths.GatewayCADir(o.StateDir)
	if _, err := ca.LoadOrCreate(caDir); err != nil {
		return nil, nil, fmt.Errorf("proxynet: installation CA: %w", err)
	}
	for _, f := range []string{ca.KeyFile, ca.CertFile} {
		data, err := os.ReadFile(filepath.Join(caDir, f))
		if err != nil {
			return nil, nil, err
		}
		files["vak/ca/"+f] = data
	}
	// The installation's receipts signing key: the gateway signs with it,
	// so the receipts kept on the host verify with the host's public key.
	keyDir := paths.GatewayReceiptsKeyDir(o.StateDir)
	if _, err := receipts.LoadOrCreateKey(keyDir); err != nil {
		return nil, nil, fmt.Errorf("proxynet: receipts key: %w", err)
	}
	for _, f := range []string{receipts.KeyFile, receipts.PubKeyFile} {
		data, err := os.ReadFile(filepath.Join(keyDir, f))
		if err != nil {
			return nil, nil, err
		}
		files["vak/receipts-key/"+f] = data
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	// Sorted, no times: the same inputs make the same bytes (refresh
	// compares digests).
	for _, name := range slices.Sorted(maps.Keys(files)) {
		data := files[name]
		// Parents before children (outermost first): a strict unpacker
		// (the cluster gateway's, wsync) creates no directory itself.
		var missing []string
		for d := filepath.Dir(name); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			missing = append(missing, d)
		}
		for _, d := range slices.Backward(missing) {
			tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o700})
		}
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(data))})
		tw.Write(data)
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), env, nil
}

func ptr[T any](v T) *T { return &v }

// fenceFlags are the netclient's fence flags (also given to its --check).
func (o *Options) fenceFlags(gw netip.Addr) []string {
	f := []string{"--gateway", gw.String()}
	if o.NestedPool.IsValid() {
		f = append(f, "--nested-pool", o.NestedPool.String())
	}
	return f
}

func (o *Options) netclientCmd(gw netip.Addr) []string {
	cmd := append([]string{"netclient"}, o.fenceFlags(gw)...)
	if o.VerifyInterval > 0 {
		cmd = append(cmd, "--verify-interval", o.VerifyInterval.String())
	}
	return cmd
}

// NestedPoolOf reads the nested pool a netclient was started with (the zero
// prefix for a plain fence).
func NestedPoolOf(cfg *container.Config) netip.Prefix {
	if cfg != nil {
		for i, a := range cfg.Cmd {
			if a == "--nested-pool" && i+1 < len(cfg.Cmd) {
				p, _ := netip.ParsePrefix(cfg.Cmd[i+1])
				return p
			}
		}
	}
	return netip.Prefix{}
}

// checkPool refuses a nested pool that overlaps the topology's networks.
func (o *Options) checkPool(ctx context.Context, nets ...string) error {
	if !o.NestedPool.IsValid() {
		return nil
	}
	others := map[string]netip.Prefix{}
	for _, n := range nets {
		ins, err := o.Engine.NetworkInspect(ctx, n, client.NetworkInspectOptions{})
		if err != nil {
			return fmt.Errorf("proxynet: inspect %s: %w", n, err)
		}
		for i, c := range ins.Network.IPAM.Config {
			others[fmt.Sprintf("%s #%d", n, i)] = c.Subnet
		}
	}
	if err := netfence.CheckPool(o.NestedPool, others); err != nil {
		return fmt.Errorf("proxynet: %w", err)
	}
	return nil
}

// waitHealthy polls until the container's health check passes.
func waitHealthy(ctx context.Context, cli *client.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultReadyTimeout)
	defer cancel()
	for {
		res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		if err != nil {
			return err
		}
		st := res.Container.State
		if st == nil || !st.Running {
			return fmt.Errorf("container %s stopped: %s", name, lastLog(cli, name))
		}
		if st.Health != nil && st.Health.Status == container.Healthy {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %s not healthy: %w: %s", name, ctx.Err(), lastLog(cli, name))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func healthy(ctx context.Context, cli *client.Client, name string) bool {
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	return err == nil && isHealthy(res)
}

// isHealthy reports an inspected container that runs and is healthy.
func isHealthy(res client.ContainerInspectResult) bool {
	return res.Container.State != nil && res.Container.State.Running &&
		res.Container.State.Health != nil && res.Container.State.Health.Status == container.Healthy
}

// lastLog returns the tail of a container's output (for errors).
func lastLog(cli *client.Client, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, name, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, rc)
	return strings.TrimSpace(out.String())
}

// addressOn returns the container's IPv4 address on a network.
func addressOn(ctx context.Context, cli *client.Client, name, net string) (netip.Addr, error) {
	res, err := cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return netip.Addr{}, err
	}
	return addressIn(res, name, net)
}

// addressIn is addressOn for an inspected container.
func addressIn(res client.ContainerInspectResult, name, net string) (netip.Addr, error) {
	if res.Container.NetworkSettings != nil {
		if ep, ok := res.Container.NetworkSettings.Networks[net]; ok && ep != nil {
			if a := ep.IPAddress; a.IsValid() {
				return a, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("proxynet: %s has no address on %s", name, net)
}

// Teardown removes the workspace's topology unless a command holds its
// lease (lease.go) or sandbox containers still use it; force removes those
// containers too and does not look at the lease (tests and benches tearing
// down what they made). The gateway's receipts are copied to the host
// state dir first. A part the daemon will not remove because something
// outside vak still uses it (a network another container was connected to)
// is left for GC, which reports it.
func Teardown(ctx context.Context, cli *client.Client, stateDir, workspace string, force bool) error {
	key := Key(workspace)
	if !force {
		r, err := startRemoval(ctx, stateDir, key, true)
		if err != nil || r == nil {
			return err // nil: in use; its holder (or a later removal) decides
		}
		defer r.done()
	}
	users, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelClientOf+"="+key)})
	if err != nil {
		return fmt.Errorf("proxynet: list users: %w", err)
	}
	if len(users.Items) > 0 && !force {
		return nil
	}
	for _, u := range users.Items {
		cli.ContainerRemove(ctx, u.ID, client.ContainerRemoveOptions{Force: true})
	}
	saveReceipts(ctx, cli, stateDir, key)
	os.Remove(warmFile(stateDir, key))
	if err := removeTopology(ctx, cli, key); err != nil && !isBusy(err) {
		return err
	}
	return nil
}

// saveReceipts copies the gateway's receipts into
// stateDir/receipts/proxynet-KEY, one file (and its head) per gateway
// lifetime, named after the gateway's creation time and container ID: a
// later topology for the same workspace writes new files and never
// truncates an earlier one. Copying the same gateway's log again replaces
// its copy with the longer log of the same chain.
func saveReceipts(ctx context.Context, cli *client.Client, stateDir, key string) {
	_, _, gwName, _, _ := names(key)
	ins, err := cli.ContainerInspect(ctx, gwName, client.ContainerInspectOptions{})
	if err != nil {
		return
	}
	CopyReceipts(ctx, cli, gwName, ReceiptsDir(stateDir, key), ReceiptsPrefix(ins.Container.Created, ins.Container.ID))
}

// CopyReceipts copies the receipts logs (and their heads) of the gateway
// state in container c, running or not (a created, never started container
// that mounts a gateway's volume at GatewayDataDir will do), into dst, each
// named prefix + its name (0600), and returns the files it wrote.
func CopyReceipts(ctx context.Context, cli *client.Client, c, dst, prefix string) ([]string, error) {
	res, err := cli.CopyFromContainer(ctx, c, client.CopyFromContainerOptions{SourcePath: paths.GatewayReceiptsDir(gatewayStateDir)})
	if err != nil {
		return nil, fmt.Errorf("proxynet: copy the receipts out of %s: %w", c, err)
	}
	defer res.Content.Close()
	var written []string
	tr := tar.NewReader(res.Content)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return written, nil
		}
		if err != nil {
			return written, fmt.Errorf("proxynet: copy the receipts out of %s: %w", c, err)
		}
		if h.Typeflag != tar.TypeReg || strings.Contains(h.Name, "..") {
			continue
		}
		p := filepath.Join(dst, prefix+filepath.Base(h.Name))
		if err := os.MkdirAll(dst, 0o700); err != nil {
			return written, fmt.Errorf("proxynet: %w", err)
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return written, fmt.Errorf("proxynet: %w", err)
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return written, fmt.Errorf("proxynet: write %s: %w", p, err)
		}
		written = append(written, p)
	}
}

// removeTopology removes a topology's containers, networks and volume, in
// reverse order of creation. Missing pieces are fine; a piece the daemon
// refuses to remove because it is in use is an error wrapping errBusy.
// Networks are removed by ID, every one labelled with the key: an Engine
// older than API 1.44 creates a second network of a name that exists (and
// then no longer removes either by name), so none must be left behind.
func removeTopology(ctx context.Context, cli *client.Client, key string) error {
	_, _, gwName, ncName, vol := names(key)
	var errs []error
	for _, c := range []string{ncName, gwName} {
		if _, err := cli.ContainerRemove(ctx, c, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, removeErr("container "+c, err))
		}
	}
	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("label", LabelKey+"="+key, engine.LabelOwner+"="+owner())})
	if err != nil {
		errs = append(errs, fmt.Errorf("list the networks of %s: %w", key, err))
	}
	for _, n := range ns.Items {
		if _, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, removeErr("network "+n.Name, err))
		}
	}
	if _, err := cli.VolumeRemove(ctx, vol, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		errs = append(errs, removeErr("volume "+vol, err))
	}
	return errors.Join(errs...)
}

// errBusy marks a part of a topology the daemon did not remove because it
// is in use: a container already being removed, a network with endpoints,
// a volume a container mounts.
var errBusy = errors.New("in use")

// removeErr names the part that could not be removed (what), and wraps
// errBusy when the daemon refused because it is in use (409 Conflict; 403
// Forbidden for a network with active endpoints).
func removeErr(what string, err error) error {
	if cerrdefs.IsConflict(err) || cerrdefs.IsPermissionDenied(err) {
		return fmt.Errorf("remove %s: %w: %v", what, errBusy, err)
	}
	return fmt.Errorf("remove %s: %w", what, err)
}

// isBusy reports an error of removeTopology whose every part is errBusy.
func isBusy(err error) bool {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return errors.Is(err, errBusy)
	}
	for _, e := range j.Unwrap() {
		if !errors.Is(e, errBusy) {
			return false
		}
	}
	return true
}

// Attachment is what a sandbox container needs to join this network.
func (n *Net) Attachment() *sandbox.NetworkAttachment {
	return &sandbox.NetworkAttachment{
		Mode:       n.NetworkMode(),
		Binds:      []string{n.Bind()},
		Env:        slices.Clone(n.Env),
		Labels:     map[string]string{LabelClientOf: n.Key, LabelNetclient: n.NetclientID},
		Gateway:    n.GatewayIP,
		NestedPool: n.NestedPool,
		TrustCA:    catrust.Dir + "/" + catrust.CAFile,
		TrustEnv:   catrust.Env(catrust.Dir),
	}
}

// GCReport says what GC did.
type GCReport struct {
	// Removed are the keys of the topologies GC removed.
	Removed []string
	// Skipped are the topologies GC left although no sandbox container
	// uses them, because they are in use otherwise.
	Skipped []Skipped
}

// Skipped is a topology GC left alone, and why.
type Skipped struct{ Key, Reason string }

// GC removes the caller's topologies that no sandbox container uses any
// more (left by a broker that was killed, or kept warm by `vak run` past
// their KeepWarm time), keeping their receipts. A topology whose lease a
// command holds (lease.go: it is being set up, or its sandbox is about to
// start or runs) is skipped, and so is one the daemon will not remove
// because a part of it is in use; both are in the report, and neither is
// an error. Only resources owned by the caller's uid (engine.LabelOwner)
// and carrying all of labels are considered: another user's topology is
// never removed and its receipts never copied.
func GC(ctx context.Context, cli *client.Client, stateDir string, labels map[string]string) (*GCReport, error) {
	keys, err := gcKeys(ctx, cli, labels)
	if err != nil {
		return nil, err
	}
	rep := &GCReport{}
	var errs []error
	for _, key := range keys {
		removed, skipped, err := gcKey(ctx, cli, stateDir, key)
		switch {
		case err != nil:
			errs = append(errs, err)
		case skipped != "":
			rep.Skipped = append(rep.Skipped, Skipped{Key: key, Reason: skipped})
		case removed:
			rep.Removed = append(rep.Removed, key)
		}
	}
	return rep, errors.Join(errs...)
}

// gcKeys lists the keys of the caller's topologies that carry labels.
func gcKeys(ctx context.Context, cli *client.Client, labels map[string]string) ([]string, error) {
	f := make(client.Filters).Add("label", engine.LabelKind+"="+KindProxynet, engine.LabelOwner+"="+owner())
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	keys := map[string]bool{}
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("proxynet: list: %w", err)
	}
	for _, c := range cs.Items {
		keys[c.Labels[LabelKey]] = true
	}
	if ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f}); err == nil {
		for _, n := range ns.Items {
			keys[n.Labels[LabelKey]] = true
		}
	}
	delete(keys, "")
	return slices.Sorted(maps.Keys(keys)), nil
}

// gcKey removes key's topology if nothing uses it and its warm time (vak
// run's KeepWarm) has passed; it reports whether it did, or why it skipped
// a topology that no container uses.
func gcKey(ctx context.Context, cli *client.Client, stateDir, key string) (removed bool, skipped string, err error) {
	r, err := startRemoval(ctx, stateDir, key, false)
	if err != nil {
		return false, "", err
	}
	if r == nil {
		return false, "a vak command holds it (setting it up, or starting or running its sandbox)", nil
	}
	defer r.done()
	if time.Now().Before(warmUntil(stateDir, key)) {
		return false, "", nil
	}
	users, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", LabelClientOf+"="+key)})
	if err != nil {
		return false, "", fmt.Errorf("proxynet: list the users of %s: %w", key, err)
	}
	if len(users.Items) > 0 {
		return false, "", nil
	}
	saveReceipts(ctx, cli, stateDir, key)
	os.Remove(warmFile(stateDir, key))
	if err := removeTopology(ctx, cli, key); err != nil {
		if isBusy(err) {
			return false, err.Error(), nil
		}
		return false, "", fmt.Errorf("proxynet: %w", err)
	}
	return true, "", nil
}
