package taskenv

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"vak/internal/dockerd"
	"vak/internal/sandbox"
)

// The --docker pool key holds what a pool pair's sidecar was started with:
// a plan that differs in the workspace, the sidecar image, the nested
// pool, the gateway, the netclient namespace, the trust dir or CA
// variables, or the propagated placeholders has another key (so it never
// claims that pair); the same plan has the same key, and a plain plan's
// key differs from a --docker one's.
func TestDockerPoolKey(t *testing.T) {
	w := filepath.Join(t.TempDir(), "vak")
	os.WriteFile(w, []byte("worker"), 0o755)
	m := &Manager{}
	base := func() *plan {
		return &plan{
			spec: Spec{Workspace: "/w", Docker: true, NetworkPolicy: sandbox.NetworkProxied, Mode: sandbox.WorkspaceWrite, DockerPlaceholders: []string{"TOKEN"}},
			id:   "t-0123456789", worker: w, imageID: "sha256:img", dockerImage: "sha256:sidecar",
			net: &sandbox.NetworkAttachment{
				Mode: "container:vak-nc-aaaa", NestedPool: netip.MustParsePrefix("10.213.0.0/16"), Gateway: netip.MustParseAddr("10.99.0.1"),
				TrustCA: "/etc/vak-trust/ca.pem", TrustEnv: []string{"SSL_CERT_FILE=/etc/vak-trust/ca.pem"},
				Binds: []string{"/var/lib/vak/trust:/etc/vak-trust:ro"}, Env: []string{"TOKEN=vak-ph-1"},
			},
		}
	}
	key := func(p *plan) string {
		t.Helper()
		k, err := m.poolKey(p)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	k0 := key(base())
	if k := key(base()); k != k0 {
		t.Fatalf("the same plan has two keys: %s %s", k0, k)
	}
	for name, mut := range map[string]func(*plan){
		"workspace":    func(p *plan) { p.spec.Workspace = "/other" },
		"sidecarImage": func(p *plan) { p.dockerImage = "sha256:other" },
		"nestedPool":   func(p *plan) { p.net.NestedPool = netip.MustParsePrefix("10.214.0.0/16") },
		"gateway":      func(p *plan) { p.net.Gateway = netip.MustParseAddr("10.99.1.1") },
		"netclient":    func(p *plan) { p.net.Mode = "container:vak-nc-bbbb" },
		"trustEnv":     func(p *plan) { p.net.TrustEnv = []string{"SSL_CERT_FILE=/x.pem"} },
		"trustCA":      func(p *plan) { p.net.TrustCA = "/etc/other/ca.pem" },
		"trustBind":    func(p *plan) { p.net.Binds = []string{"/var/lib/vak/other:/etc/vak-trust:ro"} },
		"placeholders": func(p *plan) { p.spec.DockerPlaceholders = nil },
		"placeholder":  func(p *plan) { p.net.Env = []string{"TOKEN=vak-ph-2"} },
		"plain":        func(p *plan) { p.spec.Docker = false },
	} {
		p := base()
		mut(p)
		if k := key(p); k == k0 {
			t.Errorf("%s: a different plan has the same pool key", name)
		}
	}
	p := base()
	p.dockerImage = ""
	if _, err := m.poolKey(p); !errors.Is(err, ErrDockerUnavailable) {
		t.Errorf("a --docker key without the sidecar image: %v", err)
	}
	p = base()
	p.spec.DockerPlaceholders = []string{"NOPE"}
	if _, err := m.poolKey(p); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("a --docker key propagating an unknown placeholder: %v", err)
	}
}

// The claim's comparison of a pool sidecar with a cold create's spec: the
// same spec (as the daemon records it: capabilities renamed and sorted)
// passes; each way a sidecar could be less fenced, or made for another
// plan, is named.
func TestSameSidecar(t *testing.T) {
	if _, err := dockerd.SeccompProfile(); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no seccomp profile on this OS")
	}
	s := dockerd.Sidecar{Name: "vak-dockerd-pool-0123456789abcdef", Image: "vak-dockerd:x", NetworkMode: "container:abc",
		Daemon:  dockerd.Daemon{Pool: netip.MustParsePrefix("10.213.0.0/16"), Gateway: netip.MustParseAddr("10.99.0.1")},
		TrustCA: "/etc/vak-trust/ca.pem", DataVolume: "v-lib", Labels: map[string]string{LabelSession: "pool-0123456789abcdef"},
		Guard:       []string{"/opt/vak/vak", "dockerguard", "--workspace", "/w", "--listen", ContainerDockerSocket},
		GuardSocket: ContainerDockerSocket,
		Mounts:      []mount.Mount{{Type: mount.TypeBind, Source: "/w", Target: "/w", ReadOnly: true}}}
	cfg, hc, err := s.Spec()
	if err != nil {
		t.Fatal(err)
	}
	recorded := func() container.InspectResponse {
		c, h := *cfg, *hc
		c.Cmd, c.Entrypoint = slices.Clone(cfg.Cmd), slices.Clone(cfg.Entrypoint)
		h.CapAdd = nil
		for _, cp := range hc.CapAdd {
			h.CapAdd = append(h.CapAdd, "CAP_"+cp)
		}
		slices.Sort(h.CapAdd)
		h.Mounts = slices.Clone(hc.Mounts)
		h.SecurityOpt = slices.Clone(hc.SecurityOpt)
		pids := *hc.PidsLimit
		h.PidsLimit = &pids
		return container.InspectResponse{Image: "sha256:sidecar", Config: &c, HostConfig: &h}
	}
	if err := sameSidecar(recorded(), "sha256:sidecar", cfg, hc); err != nil {
		t.Fatalf("the same spec: %v", err)
	}
	for name, tc := range map[string]struct {
		mut  func(*container.InspectResponse)
		want string
	}{
		"image": {func(r *container.InspectResponse) { r.Image = "sha256:other" }, "image"},
		"workspace": {func(r *container.InspectResponse) {
			r.Config.Cmd[len(r.Config.Cmd)-1] = strings.Replace(r.Config.Cmd[len(r.Config.Cmd)-1], "'/w'", "'/other'", 1)
		}, "--workspace"},
		"privileged": {func(r *container.InspectResponse) { r.HostConfig.Privileged = true }, "privileged=true"},
		"capability": {func(r *container.InspectResponse) {
			r.HostConfig.CapAdd = append(r.HostConfig.CapAdd, "CAP_SYS_MODULE")
		}, "CAP_SYS_MODULE"},
		"cgroupns": {func(r *container.InspectResponse) { r.HostConfig.CgroupnsMode = container.CgroupnsModeHost }, "cgroup namespace"},
		"network":  {func(r *container.InspectResponse) { r.HostConfig.NetworkMode = "container:other" }, "network mode"},
		"seccomp":  {func(r *container.InspectResponse) { r.HostConfig.SecurityOpt = []string{"seccomp=unconfined"} }, "security options"},
		"memory":   {func(r *container.InspectResponse) { r.HostConfig.Memory = 0 }, "limits"},
		"mountRW":  {func(r *container.InspectResponse) { r.HostConfig.Mounts[1].ReadOnly = false }, "mount 1"},
		"extraMount": {func(r *container.InspectResponse) {
			r.HostConfig.Mounts = append(r.HostConfig.Mounts, mount.Mount{Type: mount.TypeBind, Source: "/", Target: "/h"})
		}, "mounts"},
		"label":        {func(r *container.InspectResponse) { r.Config.Labels = map[string]string{LabelSession: "other"} }, "label"},
		"user":         {func(r *container.InspectResponse) { r.Config.User = "1000" }, "user"},
		"rawSockTmpfs": {func(r *container.InspectResponse) { r.HostConfig.Tmpfs = nil }, "tmpfs"},
	} {
		r := recorded()
		tc.mut(&r)
		if err := sameSidecar(r, "sha256:sidecar", cfg, hc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (want an error naming %q)", name, err, tc.want)
		}
	}
}
