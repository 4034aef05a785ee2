package dockerguard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/api/types/volume"
)

// legacyCreate: fields Docker 20.10's CLI and docker-compose 1.29 send
// that moby's current types dropped (accepted only with zero values).
var legacyCreate = map[string][]string{
	"":           {"MacAddress", "NetworkDisabled"},
	"HostConfig": {"KernelMemory", "KernelMemoryTCP", "Capabilities", "CpuCount", "CpuPercent", "IOMaximumIOps", "IOMaximumBandwidth"},
}

func (g *Guard) containerCreate(r *http.Request, _ []string) error {
	return rewrite(r, "container create", legacyCreate, func(c *container.CreateRequest) error {
		if c.Config == nil {
			return deny("container create: no Config")
		}
		if c.HostConfig == nil {
			c.HostConfig = &container.HostConfig{}
		}
		if g.p.StageDir != "" {
			g.sweepStage(r.Context())
		}
		if err := g.checkHost(r.Context(), c.HostConfig); err != nil {
			return err
		}
		if c.NetworkingConfig != nil {
			for name, ep := range c.NetworkingConfig.EndpointsConfig {
				if err := g.checkEndpoint(name, ep); err != nil {
					return err
				}
			}
		}
		return g.inject(r.Context(), c)
	})
}

// checkHost applies the HostConfig rules.
func (g *Guard) checkHost(ctx context.Context, h *container.HostConfig) error {
	if h.Privileged {
		return deny("HostConfig.Privileged is true")
	}
	for _, c := range h.CapAdd {
		name := strings.TrimPrefix(strings.ToUpper(c), "CAP_")
		if !SafeCaps[name] {
			return deny("HostConfig.CapAdd %q is not allowed (allowed: Docker's default capabilities)", c)
		}
	}
	nm := string(h.NetworkMode)
	switch {
	case nm == "host":
		return deny("HostConfig.NetworkMode %q is not allowed", nm)
	case strings.HasPrefix(nm, "container:"):
		if err := g.ownContainer(ctx, strings.TrimPrefix(nm, "container:"), "HostConfig.NetworkMode"); err != nil {
			return err
		}
	}
	for field, v := range map[string]string{
		"HostConfig.PidMode": string(h.PidMode), "HostConfig.IpcMode": string(h.IpcMode),
		"HostConfig.UTSMode": string(h.UTSMode), "HostConfig.UsernsMode": string(h.UsernsMode),
		"HostConfig.CgroupnsMode": string(h.CgroupnsMode),
	} {
		if v == "host" || strings.HasPrefix(v, "container:") {
			return deny("%s %q is not allowed (host or foreign namespaces)", field, v)
		}
	}
	if h.Cgroup != "" {
		return deny("HostConfig.Cgroup %q is not allowed", h.Cgroup)
	}
	if h.CgroupParent != "" {
		return deny("HostConfig.CgroupParent %q is not allowed", h.CgroupParent)
	}
	if err := checkResources(&h.Resources, "HostConfig"); err != nil {
		return err
	}
	for _, o := range h.SecurityOpt {
		if o != "no-new-privileges" && o != "no-new-privileges:true" && o != "no-new-privileges=true" {
			return deny("HostConfig.SecurityOpt %q is not allowed (only no-new-privileges)", o)
		}
	}
	if len(h.Sysctls) > 0 {
		return deny("HostConfig.Sysctls are not allowed (%s)", strings.Join(mapKeys(h.Sysctls), ", "))
	}
	if h.MaskedPaths != nil || h.ReadonlyPaths != nil {
		return deny("HostConfig.MaskedPaths/ReadonlyPaths may not be set (systempaths)")
	}
	if h.VolumeDriver != "" {
		return deny("HostConfig.VolumeDriver %q is not allowed", h.VolumeDriver)
	}
	if len(h.VolumesFrom) > 0 {
		return deny("HostConfig.VolumesFrom is not allowed (%s)", strings.Join(h.VolumesFrom, ", "))
	}
	if t := h.LogConfig.Type; t != "" && t != "json-file" && t != "local" {
		return deny("HostConfig.LogConfig.Type %q is not allowed (json-file, local)", t)
	}
	if h.Runtime != "" && h.Runtime != "runc" {
		return deny("HostConfig.Runtime %q is not allowed", h.Runtime)
	}
	if h.Isolation != "" && h.Isolation != "default" {
		return deny("HostConfig.Isolation %q is not allowed", h.Isolation)
	}
	if len(h.StorageOpt) > 0 {
		return deny("HostConfig.StorageOpt is not allowed")
	}
	if h.ContainerIDFile != "" {
		return deny("HostConfig.ContainerIDFile is not allowed")
	}
	for i, b := range h.Binds {
		nb, err := g.checkBind(ctx, b)
		if err != nil {
			return err
		}
		h.Binds[i] = nb
	}
	for i := range h.Mounts {
		if err := g.checkMount(ctx, &h.Mounts[i]); err != nil {
			return err
		}
	}
	return nil
}

func checkResources(r *container.Resources, where string) error {
	if len(r.Devices) > 0 {
		return deny("%s.Devices is not allowed (%s)", where, r.Devices[0].PathOnHost)
	}
	if len(r.DeviceCgroupRules) > 0 {
		return deny("%s.DeviceCgroupRules is not allowed (%s)", where, r.DeviceCgroupRules[0])
	}
	if len(r.DeviceRequests) > 0 {
		return deny("%s.DeviceRequests is not allowed (driver %q)", where, r.DeviceRequests[0].Driver)
	}
	if r.CgroupParent != "" {
		return deny("%s.CgroupParent %q is not allowed", where, r.CgroupParent)
	}
	return nil
}

// checkBind checks a "src:dst[:opts]" bind and returns it, rewritten when
// its source is the guard's own socket.
func (g *Guard) checkBind(ctx context.Context, b string) (string, error) {
	parts := strings.Split(b, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return "", deny("HostConfig.Binds %q is not SRC:DST[:OPTS]", b)
	}
	src, opts := parts[0], ""
	if len(parts) == 3 {
		opts = parts[2]
	}
	if !strings.HasPrefix(src, "/") {
		// A named volume: volumes are created through the guard, so
		// without driver options.
		return b, nil
	}
	ro := slices.Contains(strings.Split(opts, ","), "ro")
	nsrc, err := g.checkSource(ctx, src, ro, true, "HostConfig.Binds")
	if err != nil {
		return "", err
	}
	parts[0] = nsrc
	return strings.Join(parts, ":"), nil
}

func (g *Guard) checkMount(ctx context.Context, m *mount.Mount) error {
	switch m.Type {
	case mount.TypeBind:
		if m.BindOptions != nil && m.BindOptions.NonRecursive {
			// A non-recursive bind of the workspace drops the session's
			// read-only protected mounts under it.
			return deny("HostConfig.Mounts bind %q: BindOptions.NonRecursive is not allowed (it would drop the read-only protected paths)", m.Source)
		}
		src, err := g.checkSource(ctx, m.Source, m.ReadOnly, false, "HostConfig.Mounts")
		if err != nil {
			return err
		}
		m.Source = src
	case mount.TypeVolume:
		if m.VolumeOptions != nil && m.VolumeOptions.DriverConfig != nil && (m.VolumeOptions.DriverConfig.Name != "" && m.VolumeOptions.DriverConfig.Name != "local" || len(m.VolumeOptions.DriverConfig.Options) > 0) {
			return deny("HostConfig.Mounts volume %q: driver configuration is not allowed", m.Source)
		}
		if m.VolumeOptions != nil && m.VolumeOptions.Subpath != "" {
			return deny("HostConfig.Mounts volume %q: Subpath is not allowed", m.Source)
		}
	case mount.TypeTmpfs:
	default:
		return deny("HostConfig.Mounts type %q is not allowed", m.Type)
	}
	return nil
}

// checkSource allows bind sources inside the workspace (without symlinks
// leading out), the trust dir read-only, and the guard socket (rewritten
// to the reaper socket). With a stage dir, a workspace source is staged
// (stageBind; create: a missing source becomes a directory, as the engine
// does for Binds).
func (g *Guard) checkSource(ctx context.Context, src string, ro, create bool, field string) (string, error) {
	clean := path.Clean(src)
	if g.p.GuardSocket != "" && clean == path.Clean(g.p.GuardSocket) {
		if g.p.ReaperSocket == "" {
			return "", deny("%s source %q (the Docker socket) is not allowed", field, src)
		}
		return g.p.ReaperSocket, nil
	}
	if within(clean, g.p.TrustDir) {
		if !ro {
			return "", deny("%s source %q: the trust dir may only be bound read-only", field, src)
		}
		return clean, nil
	}
	if !within(clean, g.p.Workspace) {
		return "", deny("%s source %q is outside the workspace %s and the trust dir", field, src, g.p.Workspace)
	}
	if g.p.StageDir != "" {
		target := g.reserve(ctx)
		if err := g.stageBind(target, clean, create, field); err != nil {
			return "", err
		}
		return target, nil
	}
	// A symlink inside the workspace may point anywhere in the engine's
	// filesystem (which holds the raw socket): resolve and check again.
	if real, err := filepath.EvalSymlinks(clean); err == nil && real != clean {
		if !within(real, g.p.Workspace) {
			return "", deny("%s source %q resolves to %q, outside the workspace", field, src, real)
		}
		return real, nil
	}
	return clean, nil
}

func within(p, dir string) bool {
	dir = path.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func (g *Guard) checkEndpoint(name string, ep *network.EndpointSettings) error {
	if ep == nil {
		return nil
	}
	if ep.IPAMConfig != nil {
		for _, a := range append([]netip.Addr{ep.IPAMConfig.IPv4Address, ep.IPAMConfig.IPv6Address}, ep.IPAMConfig.LinkLocalIPs...) {
			if a.IsValid() && !g.p.Pool.Contains(a) {
				return deny("NetworkingConfig.EndpointsConfig[%s] address %v is outside the pool %v", name, a, g.p.Pool)
			}
		}
	}
	if len(ep.DriverOpts) > 0 {
		return deny("NetworkingConfig.EndpointsConfig[%s].DriverOpts are not allowed", name)
	}
	return nil
}

// ownContainer allows container:<x> only for a container this guard
// created (it carries the owner labels).
func (g *Guard) ownContainer(ctx context.Context, ref, field string) error {
	var ins struct {
		Config struct{ Labels map[string]string }
	}
	if err := g.get(ctx, "/containers/"+ref+"/json", &ins); err != nil {
		return deny("%s container:%s: %v", field, ref, err)
	}
	for k, v := range g.p.Labels {
		if ins.Config.Labels[k] != v {
			return deny("%s container:%s is not a container of this sandbox", field, ref)
		}
	}
	return nil
}

// inject adds the trust bind, the CA environment, the DNS server and the
// owner labels.
func (g *Guard) inject(ctx context.Context, c *container.CreateRequest) error {
	h := c.HostConfig
	hasTrust := false
	for _, b := range h.Binds {
		if p := strings.Split(b, ":"); len(p) >= 2 && path.Clean(p[1]) == path.Clean(g.p.TrustDir) {
			hasTrust = true
		}
	}
	for _, m := range h.Mounts {
		if path.Clean(m.Target) == path.Clean(g.p.TrustDir) {
			hasTrust = true
		}
	}
	if !hasTrust {
		h.Binds = append(h.Binds, g.p.TrustDir+":"+g.p.TrustDir+":ro")
	}
	if string(h.NetworkMode) != "none" && !strings.HasPrefix(string(h.NetworkMode), "container:") {
		h.DNS = []netip.Addr{g.p.DNS}
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	for k, v := range g.p.Labels {
		c.Labels[k] = v
	}
	var imageEnv []string
	if c.Image != "" {
		var ins struct{ Config struct{ Env []string } }
		if err := g.get(ctx, "/images/"+c.Image+"/json", &ins); err == nil {
			imageEnv = ins.Config.Env
		}
	}
	for _, kv := range g.p.Env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(c.Env, func(e string) bool { n, _, _ := strings.Cut(e, "="); return n == k }) {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = MergeEnv(imageEnv, c.Env, g.p.TrustEnv)
	return nil
}

// mergeable variables are joined (space-separated) rather than replaced.
var mergeable = map[string]bool{"JAVA_TOOL_OPTIONS": true, "NODE_OPTIONS": true}

// MergeEnv returns request env with trust set: trust variables replace the
// request's, except JAVA_TOOL_OPTIONS and NODE_OPTIONS, which become the
// request's (or else the image's) value followed by the trust value.
func MergeEnv(image, request, trust []string) []string {
	get := func(env []string, k string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if n, v, ok := strings.Cut(env[i], "="); ok && n == k {
				return v, true
			}
		}
		return "", false
	}
	out := slices.Clone(request)
	for _, kv := range trust {
		k, v, _ := strings.Cut(kv, "=")
		if mergeable[k] {
			base, ok := get(request, k)
			if !ok {
				base, ok = get(image, k)
			}
			if ok && base != "" && !strings.Contains(base, v) {
				v = base + " " + v
			}
		}
		out = slices.DeleteFunc(out, func(e string) bool { n, _, _ := strings.Cut(e, "="); return n == k })
		out = append(out, k+"="+v)
	}
	return out
}

func (g *Guard) containerUpdate(r *http.Request, _ []string) error {
	return rewrite(r, "container update", map[string][]string{"": {"KernelMemory", "KernelMemoryTCP", "CpuCount", "CpuPercent", "IOMaximumIOps", "IOMaximumBandwidth"}}, func(u *container.UpdateConfig) error {
		return checkResources(&u.Resources, "UpdateConfig")
	})
}

func (g *Guard) execCreate(r *http.Request, _ []string) error {
	return rewrite(r, "exec create", map[string][]string{"": {"Detach*"}}, func(e *container.ExecCreateRequest) error {
		if e.Privileged {
			return deny("exec Privileged is true")
		}
		return nil
	})
}

func (g *Guard) execStart(r *http.Request, _ []string) error {
	return rewrite(r, "exec start", nil, func(*container.ExecStartRequest) error { return nil })
}

func (g *Guard) imageCreate(r *http.Request, _ []string) error {
	if src, bad := badValue(query(r), "fromSrc", func(v string) bool { return v == "" || v == "-" }); bad {
		return deny("images/create fromSrc %q (import from a URL) is not allowed", src)
	}
	return nil
}

// buildParams are the /build parameters the guard checks (what names
// one in a denial), and what each may be. BuildKit (version=2) sends the
// context over its /session stream and says so with
// remote=client-session; any other remote is a URL.
var buildParams = []struct {
	key, what string
	ok        func(v string, buildKit bool) bool
}{
	{"remote", "remote context", func(v string, buildKit bool) bool { return v == "" || v == "client-session" && buildKit }},
	{"networkmode", "networkmode", func(v string, _ bool) bool { return v == "" || v == "default" || v == "bridge" || v == "none" }},
	{"cgroupparent", "cgroupparent", func(v string, _ bool) bool { return v == "" }},
	{"securityopt", "securityopt", func(v string, _ bool) bool { return v == "" || v == "[]" || v == "null" }},
}

func (g *Guard) build(r *http.Request, _ []string) error {
	q := query(r)
	// The engine takes the first version (FormValue), as Get does.
	buildKit := q.Get("version") == "2"
	for _, p := range buildParams {
		if v, bad := badValue(q, p.key, func(v string) bool { return p.ok(v, buildKit) }); bad {
			return deny("build %s %q is not allowed", p.what, v)
		}
	}
	return nil
}

func (g *Guard) networkCreate(r *http.Request, _ []string) error {
	return rewrite(r, "network create", map[string][]string{"": {"CheckDuplicate*"}}, func(n *network.CreateRequest) error {
		if n.Driver != "" && n.Driver != "bridge" {
			return deny("network Driver %q is not allowed (bridge only)", n.Driver)
		}
		if n.Scope != "" && n.Scope != "local" {
			return deny("network Scope %q is not allowed", n.Scope)
		}
		if n.Ingress || n.ConfigOnly || n.ConfigFrom != nil {
			return deny("network Ingress/ConfigOnly/ConfigFrom are not allowed")
		}
		if n.EnableIPv6 != nil && *n.EnableIPv6 {
			return deny("network EnableIPv6 is not allowed")
		}
		for k := range n.Options {
			if k != "com.docker.network.bridge.enable_icc" && k != "com.docker.network.driver.mtu" {
				return deny("network option %q is not allowed", k)
			}
		}
		if n.IPAM != nil {
			if n.IPAM.Driver != "" && n.IPAM.Driver != "default" {
				return deny("network IPAM.Driver %q is not allowed", n.IPAM.Driver)
			}
			if len(n.IPAM.Options) > 0 {
				return deny("network IPAM.Options are not allowed")
			}
			for _, c := range n.IPAM.Config {
				if c.Subnet.IsValid() && !(g.p.Pool.Contains(c.Subnet.Addr()) && c.Subnet.Bits() >= g.p.Pool.Bits()) {
					return deny("network subnet %v is outside the pool %v", c.Subnet, g.p.Pool)
				}
				if c.IPRange.IsValid() && !(g.p.Pool.Contains(c.IPRange.Addr()) && c.IPRange.Bits() >= g.p.Pool.Bits()) {
					return deny("network IPRange %v is outside the pool %v", c.IPRange, g.p.Pool)
				}
				if c.Gateway.IsValid() && !g.p.Pool.Contains(c.Gateway) {
					return deny("network gateway %v is outside the pool %v", c.Gateway, g.p.Pool)
				}
				if len(c.AuxAddress) > 0 {
					return deny("network AuxiliaryAddresses are not allowed")
				}
			}
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range g.p.Labels {
			n.Labels[k] = v
		}
		return nil
	})
}

func (g *Guard) networkDisconnect(r *http.Request, _ []string) error {
	return rewrite(r, "network disconnect", nil, func(*network.DisconnectRequest) error { return nil })
}

func (g *Guard) networkConnect(r *http.Request, _ []string) error {
	return rewrite(r, "network connect", nil, func(c *network.ConnectRequest) error {
		return g.checkEndpoint(c.Container, c.EndpointConfig)
	})
}

func (g *Guard) volumeCreate(r *http.Request, _ []string) error {
	return rewrite(r, "volume create", nil, func(v *volume.CreateRequest) error {
		if v.Driver != "" && v.Driver != "local" {
			return deny("volume Driver %q is not allowed", v.Driver)
		}
		if len(v.DriverOpts) > 0 {
			return deny("volume DriverOpts are not allowed (%s)", strings.Join(mapKeys(v.DriverOpts), ", "))
		}
		if v.ClusterVolumeSpec != nil {
			return deny("volume ClusterVolumeSpec is not allowed")
		}
		if v.Labels == nil {
			v.Labels = map[string]string{}
		}
		for k, val := range g.p.Labels {
			v.Labels[k] = val
		}
		return nil
	})
}

// get reads a JSON document from the engine.
func (g *Guard) get(ctx context.Context, p string, v any) error {
	u := &url.URL{Scheme: "http", Host: "docker", Path: p}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	res, err := g.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("engine answered %s", res.Status)
	}
	return json.NewDecoder(res.Body).Decode(v)
}

func mapKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
