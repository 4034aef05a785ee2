//go:build kubernetes

package launch

import (
	"context"
	"strings"
	"testing"

	"vak/internal/config"
	"vak/internal/testenv/kubetest"
)

// TestKubeDoctor: vak doctor's line on the kubernetes backend, against a
// real API server: its version, the namespace and its Pod Security level,
// and why user namespaces are not used (an API server alone has no nodes);
// and nothing at all when sessions do not use a cluster.
func TestKubeDoctor(t *testing.T) {
	env := kubetest.APIServer(t)
	cfg := config.Default()
	if got := KubeDoctor(context.Background(), cfg); got != "" {
		t.Fatalf("doctor's kubernetes line without kubernetes configured: %q", got)
	}
	cfg.Session.Backend = BackendKubernetes
	cfg.Kubernetes.Kubeconfig = env.Kubeconfig(t)
	got := KubeDoctor(context.Background(), cfg)
	for _, want := range []string{`context "vaktest"`, "server v1.", "namespace " + env.Namespace, "pod security unset (privileged)", "default runtime", "user namespaces: no: the cluster has no nodes"} {
		if !strings.Contains(got, want) {
			t.Errorf("doctor's line %q lacks %q", got, want)
		}
	}
}
