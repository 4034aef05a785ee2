package devcontainer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"vak/internal/dockerd"
	"vak/internal/egress/ca"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/logins"
	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/proxynet"
)

// ErrStale reports a template whose placeholders no longer cover the
// trusted config's secrets.
var ErrStale = errors.New("devcontainer: the template is out of date")

// Placeholders returns the workspace's placeholders for names, creating
// (and saving) fresh ones for names that have none yet.
func Placeholders(stateDir, key string, names []string) (map[string]string, error) {
	return proxynet.Placeholders(PlaceholderFile(stateDir, key), names)
}

// SecretNames are the secrets of the trusted config's sections, sorted.
func SecretNames(s *egressconfig.Sections) []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.Secrets))
}

// PrepareOptions configure Prepare.
type PrepareOptions struct {
	Engine     *client.Client
	Workspace  string // canonical
	Binary     string // the static Linux vak the vak-net image is built from
	Sections   *egressconfig.Sections
	ConfigFile string
	StateDir   string
	Labels     map[string]string
	Progress   io.Writer
	Getenv     func(string) string
}

func (o *PrepareOptions) progressf(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "vak: "+format+"\n", a...)
	}
}

// Prepare runs on the host before compose (the template's
// initializeCommand): it builds or finds the vak-net image and points
// NetImage at it, checks the sandbox subnet is free, fills the gateway's
// volume (config, CA, secrets, the template's placeholders) and the trust
// volume (public CA files), restarts a running gateway whose config
// changed, and removes an agent container left in a dead netclient
// namespace so that compose recreates it.
func Prepare(ctx context.Context, o PrepareOptions) error {
	if o.Engine == nil || o.Workspace == "" || o.StateDir == "" {
		return errors.New("devcontainer: Engine, Workspace and StateDir are required")
	}
	key := proxynet.Key(o.Workspace)
	cli := o.Engine
	ph, err := Placeholders(o.StateDir, key, SecretNames(o.Sections))
	if err != nil {
		return err
	}
	if err := checkTemplate(o.Workspace, ph); err != nil {
		return err
	}
	phJSON, _ := json.Marshal(ph)
	payload, err := proxynet.GatewayPayload(proxynet.Options{Sections: o.Sections, ConfigFile: o.ConfigFile, StateDir: o.StateDir, Getenv: o.Getenv,
		LoginStore: filepath.Join(o.StateDir, logins.StoreFile)},
		map[string][]byte{"vak/placeholders.json": phJSON})
	if err != nil {
		return err
	}
	tag, err := proxynet.EnsureImage(ctx, cli, o.Binary, o.Progress)
	if err != nil {
		return err
	}
	if _, err := cli.ImageTag(ctx, client.ImageTagOptions{Source: tag, Target: NetImage}); err != nil {
		return fmt.Errorf("devcontainer: tag %s as %s: %w", tag, NetImage, err)
	}
	if err := checkSubnet(ctx, cli, key); err != nil {
		return err
	}
	labels := map[string]string{engine.LabelManaged: "true", LabelKey: key, engine.LabelWorkspace: o.Workspace}
	maps.Copy(labels, o.Labels)
	vols := []string{GatewayVolume(key), TrustVolume(key)}
	if hasDockerd(o.Workspace) {
		vols = append(vols, BinVolume(key), DockerVolume(key), SocketVolume(key))
	}
	for _, v := range vols {
		if _, err := cli.VolumeInspect(ctx, v, client.VolumeInspectOptions{}); err == nil {
			continue
		} else if !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("devcontainer: inspect volume %s: %w", v, err)
		}
		if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: v, Labels: labels}); err != nil {
			return fmt.Errorf("devcontainer: create volume %s: %w", v, err)
		}
	}
	auth, err := ca.LoadOrCreate(paths.GatewayCADir(o.StateDir))
	if err != nil {
		return fmt.Errorf("devcontainer: installation CA: %w", err)
	}
	trust, err := trustTar(auth.CertPEM())
	if err != nil {
		return err
	}
	digestFile := filepath.Join(o.StateDir, "devcontainer", key, "gateway.digest")
	sum := sha256.Sum256(payload)
	digest := fmt.Sprintf("%x", sum)
	old, _ := os.ReadFile(digestFile)
	fills := []volumeFill{{GatewayVolume(key), proxynet.GatewayDataDir, payload}, {TrustVolume(key), "/trust", trust}}
	docker := hasDockerd(o.Workspace)
	binDigestFile := filepath.Join(o.StateDir, "devcontainer", key, "bin.digest")
	var binDigest string
	if docker {
		bin, sum, err := o.dockerPrepare(ctx, key, labels, binDigestFile)
		if err != nil {
			return err
		}
		if bin != nil {
			fills = append(fills, volumeFill{BinVolume(key), VakDir, bin})
			binDigest = sum
		}
	}
	if err := fill(ctx, cli, tag, labels, fills); err != nil {
		return err
	}
	if binDigest != "" {
		if err := os.WriteFile(binDigestFile, []byte(binDigest), 0o600); err != nil {
			return fmt.Errorf("devcontainer: %w", err)
		}
	}
	if string(old) != digest {
		// A running gateway read the old config: restart it in place (same
		// container, address and placeholders; the netclient re-verifies).
		if gw, err := serviceContainer(ctx, cli, key, "gateway"); err == nil && gw.State == container.StateRunning {
			o.progressf("the gateway's config changed: restarting it")
			if _, err := cli.ContainerRestart(ctx, gw.ID, client.ContainerRestartOptions{}); err != nil {
				return fmt.Errorf("devcontainer: restart gateway: %w", err)
			}
			if err := waitHealthy(ctx, cli, gw.ID); err != nil {
				return fmt.Errorf("devcontainer: the restarted gateway: %w", err)
			}
		}
		os.MkdirAll(filepath.Dir(digestFile), 0o700)
		if err := os.WriteFile(digestFile, []byte(digest), 0o600); err != nil {
			return fmt.Errorf("devcontainer: %w", err)
		}
	}
	// An agent container in a netclient namespace that is gone (the
	// netclient was recreated alone) has no network but loopback: compose
	// would leave it there. Remove it so that this `up` recreates it.
	st, err := Inspect(ctx, cli, o.Workspace)
	if err != nil {
		return err
	}
	for _, svc := range st.joiners() {
		if c, problem := st.Services[svc], st.Stale[svc]; c != nil && problem != "" {
			o.progressf("the %s container %s is in a dead network namespace (%s): removing it so that compose recreates it", svc, short(c.ID), problem)
			if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
				return fmt.Errorf("devcontainer: remove the stale %s container: %w", svc, err)
			}
		}
	}
	o.progressf("dev container prepared (gateway %s on %s)", GatewayIP(key), Subnet(key))
	return nil
}

// checkTemplate fails when compose.yml does not parse (ErrBroken, naming
// the file and line) or the agent's environment in it lacks a placeholder
// the gateway will hand out (ErrStale: a secret added to the config after
// init).
func checkTemplate(ws string, ph map[string]string) error {
	c, err := readCompose(ws)
	if err != nil {
		return err
	}
	env := c.env("app")
	for _, name := range slices.Sorted(maps.Keys(ph)) {
		if env[name] != ph[name] {
			return fmt.Errorf("%w: %s has no placeholder for secret %s of the trusted config: run vak devcontainer init --force", ErrStale, filepath.Join(ws, Dir, ComposeFile), name)
		}
	}
	return nil
}

// checkSubnet fails if another Docker network overlaps the sandbox subnet.
func checkSubnet(ctx context.Context, cli *client.Client, key string) error {
	sub := Subnet(key)
	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return fmt.Errorf("devcontainer: list networks: %w", err)
	}
	for _, n := range ns.Items {
		if n.Labels[LabelKey] == key {
			continue
		}
		for _, c := range n.IPAM.Config {
			if c.Subnet.IsValid() && c.Subnet.Overlaps(sub) {
				return fmt.Errorf("devcontainer: the sandbox subnet %s overlaps Docker network %s (%s): remove that network", sub, n.Name, c.Subnet)
			}
		}
	}
	return nil
}

type volumeFill struct {
	volume, target string
	tar            []byte
}

// fill copies tar payloads into volumes through a created, never started,
// container of the vak-net image.
func fill(ctx context.Context, cli *client.Client, image string, labels map[string]string, fills []volumeFill) error {
	var mounts []mount.Mount
	for _, f := range fills {
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: f.volume, Target: f.target})
	}
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Labels: labels, Cmd: []string{"version"}},
		HostConfig: &container.HostConfig{NetworkMode: "none", Mounts: mounts},
	})
	if err != nil {
		return fmt.Errorf("devcontainer: create the volume filler: %w", err)
	}
	defer cli.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true})
	for _, f := range fills {
		if _, err := cli.CopyToContainer(ctx, res.ID, client.CopyToContainerOptions{DestinationPath: f.target, Content: bytes.NewReader(f.tar)}); err != nil {
			return fmt.Errorf("devcontainer: fill %s: %w", f.volume, err)
		}
	}
	return nil
}

// hasDockerd reports whether the workspace's template is the --docker
// variant (its compose project has the dockerd service).
func hasDockerd(ws string) bool {
	c, err := readCompose(ws)
	if err != nil {
		return false
	}
	_, ok := c.Services["dockerd"]
	return ok
}

// dockerPrepare readies the --docker variant: the sidecar image (built or
// found, tagged DockerdImage), dockerd's seccomp profile in the state dir,
// and the vak binary for dockerd's volume when it changed (nil otherwise;
// sum is its digest for digestFile).
func (o *PrepareOptions) dockerPrepare(ctx context.Context, key string, labels map[string]string, digestFile string) (binTar []byte, sum string, err error) {
	tag, err := dockerd.EnsureImage(ctx, o.Engine, dockerd.DefaultRecipe, o.Progress)
	if err != nil {
		return nil, "", err
	}
	if _, err := o.Engine.ImageTag(ctx, client.ImageTagOptions{Source: tag, Target: DockerdImage}); err != nil {
		return nil, "", fmt.Errorf("devcontainer: tag %s as %s: %w", tag, DockerdImage, err)
	}
	if err := WriteSeccomp(o.StateDir, key); err != nil {
		return nil, "", err
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, "", fmt.Errorf("devcontainer: the vak binary for dockerd: %w", err)
	}
	h := sha256.Sum256(bin)
	sum = fmt.Sprintf("%x", h)
	if old, _ := os.ReadFile(digestFile); string(old) == sum {
		if _, err := o.Engine.VolumeInspect(ctx, BinVolume(key), client.VolumeInspectOptions{}); err == nil {
			return nil, "", nil
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "vak", Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), sum, nil
}

// WriteSeccomp writes dockerd's seccomp profile (dockerd.SeccompProfile)
// to SeccompFile; compose reads it from there.
func WriteSeccomp(stateDir, key string) error {
	prof, err := dockerd.SeccompProfile()
	if err != nil {
		return err
	}
	p := SeccompFile(stateDir, key)
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, prof) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("devcontainer: %w", err)
	}
	if err := os.WriteFile(p+".tmp", prof, 0o644); err != nil {
		return fmt.Errorf("devcontainer: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("devcontainer: %w", err)
	}
	return nil
}

// trustTar is the trust volume's content (public files, 0644).
func trustTar(caPEM []byte) ([]byte, error) {
	dir, err := os.MkdirTemp("", "vak-trust-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := proxynet.WriteTrust(dir, caPEM, proxynet.SystemRoots()); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		tw.WriteHeader(&tar.Header{Name: e.Name(), Mode: 0o644, Size: int64(len(data))})
		tw.Write(data)
	}
	return buf.Bytes(), tw.Close()
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// waitHealthy polls a container until its health check passes.
func waitHealthy(ctx context.Context, cli *client.Client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, proxynet.DefaultReadyTimeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			return err
		}
		if st := res.Container.State; st != nil {
			if !st.Running {
				return fmt.Errorf("%s is not running (%s)", short(id), st.Status)
			}
			if st.Health != nil && st.Health.Status == container.Healthy {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy after %v", short(id), proxynet.DefaultReadyTimeout)
		case <-tick.C:
		}
	}
}
