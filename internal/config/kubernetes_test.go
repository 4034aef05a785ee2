package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestKubernetesConfig(t *testing.T) {
	cfg, err := Parse("user.toml", []byte(`version = 1
[session]
backend = "kubernetes"
[kubernetes]
kubeconfig = "/etc/vak/kubeconfig"
context = "prod agents@eu"
namespace = "agents"
runtime_class = "gvisor"
worker_image = "registry.example:5000/vak-worker:0123456789ab"
pull_policy = "Never"
gateway_replicas = 3
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Session.Backend != "kubernetes" {
		t.Errorf("session.backend = %q", cfg.Session.Backend)
	}
	want := Kubernetes{Kubeconfig: "/etc/vak/kubeconfig", Context: "prod agents@eu", Namespace: "agents", RuntimeClass: "gvisor", WorkerImage: "registry.example:5000/vak-worker:0123456789ab", PullPolicy: "Never", GatewayReplicas: 3}
	if !reflect.DeepEqual(cfg.Kubernetes, want) {
		t.Fatalf("kubernetes = %+v", cfg.Kubernetes)
	}
	def := Default()
	if def.Session.Backend != "docker" || def.Kubernetes != DefaultKubernetes() || def.Kubernetes.PullPolicy != "IfNotPresent" || def.Kubernetes.GatewayReplicas != 1 {
		t.Errorf("defaults: session.backend %q, kubernetes %+v", def.Session.Backend, def.Kubernetes)
	}
}

func TestKubernetesConfigInvalid(t *testing.T) {
	for _, tc := range []struct{ body, key string }{
		{"[session]\nbackend = \"k8s\"", "session.backend"},
		{"[session]\nbackend = \"Kubernetes\"", "session.backend"},
		{"[kubernetes]\nkubeconfig = \"relative/config\"", "kubernetes.kubeconfig"},
		{"[kubernetes]\ncontext = \"\"", "kubernetes.context"},
		{"[kubernetes]\ncontext = \"a\\nb\"", "kubernetes.context"},
		{"[kubernetes]\nnamespace = \"Agents\"", "kubernetes.namespace"},
		{"[kubernetes]\nnamespace = \"-agents\"", "kubernetes.namespace"},
		{"[kubernetes]\nnamespace = \"" + strings.Repeat("a", 64) + "\"", "kubernetes.namespace"},
		{"[kubernetes]\nruntime_class = \"gVisor\"", "kubernetes.runtime_class"},
		{"[kubernetes]\nworker_image = \"--privileged\"", "kubernetes.worker_image"},
		{"[kubernetes]\nworker_image = \"a b\"", "kubernetes.worker_image"},
		{"[kubernetes]\npull_policy = \"never\"", "kubernetes.pull_policy"},
		{"[kubernetes]\nnodes = 3", "kubernetes.nodes"},
		{"[kubernetes]\ngateway_replicas = 0", "kubernetes.gateway_replicas"},
		{"[kubernetes]\ngateway_replicas = 17", "kubernetes.gateway_replicas"},
		{"[kubernetes]\ngateway_replicas = \"2\"", "kubernetes.gateway_replicas"},
	} {
		_, err := Parse("user.toml", []byte("version = 1\n"+tc.body+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), "user.toml") {
			t.Errorf("%s: %v (want an error naming %s and the file)", tc.body, err, tc.key)
		}
	}
}

// [kubernetes] and session.backend are privileged: a project config that
// points sessions at another cluster, namespace or worker image is ignored
// with a warning naming each key.
func TestKubernetesConfigUntrusted(t *testing.T) {
	dir := t.TempDir()
	user := write(t, filepath.Join(dir, "user.toml"), "version = 1\n[kubernetes]\nnamespace = \"agents\"\n")
	ws := filepath.Join(dir, "ws")
	write(t, filepath.Join(ws, ".vak", "config.toml"), `version = 1
[session]
backend = "kubernetes"
[kubernetes]
kubeconfig = "/tmp/evil-kubeconfig"
context = "attacker"
namespace = "kube-system"
runtime_class = "privileged"
worker_image = "evil/vak:1"
pull_policy = "Always"
gateway_replicas = 16
`)
	cfg, err := Load(Options{UserFile: user, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultKubernetes()
	want.Namespace = "agents"
	if !reflect.DeepEqual(cfg.Kubernetes, want) || cfg.Session.Backend != "docker" {
		t.Fatalf("project config changed [kubernetes] or session.backend: %+v, %q", cfg.Kubernetes, cfg.Session.Backend)
	}
	warn := strings.Join(cfg.Warnings, "\n")
	for _, k := range []string{"session.backend", "kubernetes.kubeconfig", "kubernetes.context", "kubernetes.namespace", "kubernetes.runtime_class", "kubernetes.worker_image", "kubernetes.pull_policy", "kubernetes.gateway_replicas"} {
		if !strings.Contains(warn, "ignoring "+k+":") {
			t.Errorf("no warning for %s:\n%s", k, warn)
		}
	}
}
