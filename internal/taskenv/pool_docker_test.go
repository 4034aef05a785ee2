package taskenv

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

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
			spec: Spec{Workspace: "/w", Docker: true, NetworkPolicy: NetworkProxied, Mode: sandbox.WorkspaceWrite, DockerPlaceholders: []string{"TOKEN"}},
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
