package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// The [kubernetes] section configures the kubernetes session backend
// (`vak session create --backend kubernetes`, docs/kubernetes.md). It is
// privileged like [session]: which cluster, namespace and runtime class a
// session runs on, and which worker image its pods start, are the
// operator's decisions, so a project config cannot set any of it.
//
//	[session]
//	backend = "kubernetes"               # sessions on the cluster ("docker", the default: on the Engine)
//
//	[kubernetes]
//	kubeconfig = "~/.kube/config"        # default: $KUBECONFIG, then ~/.kube/config
//	context = "prod-agents"              # default: the kubeconfig's current context
//	namespace = "agents"                 # default: the context's namespace, then "default"
//	runtime_class = "gvisor"             # RuntimeClass of session pods (default: the cluster's default runtime)
//	worker_image = "registry.example/vak-worker:0123456789ab"  # image holding the static vak at /vak
//	pull_policy = "IfNotPresent"         # imagePullPolicy of the worker and session images
//	gateway_replicas = 1                 # pods of the namespace's egress gateway (1 to 16)

// SessionBackends are the valid session.backend values.
var SessionBackends = []string{"docker", "kubernetes"}

// PullPolicies are the valid kubernetes.pull_policy values (Kubernetes'
// imagePullPolicy).
var PullPolicies = []string{"IfNotPresent", "Always", "Never"}

// Kubernetes is the validated [kubernetes] section. Empty fields mean the
// defaults named in the section's comment.
type Kubernetes struct {
	Kubeconfig   string
	Context      string
	Namespace    string
	RuntimeClass string
	WorkerImage  string
	PullPolicy   string
	// GatewayReplicas is the number of gateway pods per namespace.
	GatewayReplicas int
}

// MaxGatewayReplicas bounds kubernetes.gateway_replicas.
const MaxGatewayReplicas = 16

// DefaultKubernetes returns the built-in [kubernetes] values.
func DefaultKubernetes() Kubernetes {
	return Kubernetes{PullPolicy: "IfNotPresent", GatewayReplicas: 1}
}

type kubernetesWire struct {
	Kubeconfig   *string `toml:"kubeconfig"`
	Context      *string `toml:"context"`
	Namespace    *string `toml:"namespace"`
	RuntimeClass *string `toml:"runtime_class"`
	WorkerImage  *string `toml:"worker_image"`
	PullPolicy   *string `toml:"pull_policy"`
	// GatewayReplicas is gateway_replicas.
	GatewayReplicas *int `toml:"gateway_replicas"`
}

// dnsLabelRe is a Kubernetes namespace name (RFC 1123 label);
// dnsSubdomainRe a RuntimeClass name (RFC 1123 subdomain).
var (
	dnsLabelRe     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`) })
	dnsSubdomainRe = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	})
	// imageRefRe is deliberately loose (registries vary); it refuses
	// whitespace, control characters and option-looking values.
	imageRefRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$`) })
)

// applyKubernetes validates and applies [kubernetes]. Only trusted files
// reach here with it set (strip removes it from project configs).
func (c *Config) applyKubernetes(file string, k *kubernetesWire) error {
	if k == nil {
		return nil
	}
	errf := func(key, format string, a ...any) error {
		return &Error{File: file, Key: "kubernetes." + key, Msg: fmt.Sprintf(format, a...)}
	}
	next := c.Kubernetes
	if k.Kubeconfig != nil {
		p, err := hostPath(*k.Kubeconfig)
		if err != nil {
			return errf("kubeconfig", "%v", err)
		}
		next.Kubeconfig = p
	}
	if k.Context != nil {
		if *k.Context == "" || strings.ContainsFunc(*k.Context, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return errf("context", "%q is not a context name", *k.Context)
		}
		next.Context = *k.Context
	}
	if k.Namespace != nil {
		if !dnsLabelRe().MatchString(*k.Namespace) {
			return errf("namespace", "%q is not a namespace name (lower-case letters, digits and '-', at most 63)", *k.Namespace)
		}
		next.Namespace = *k.Namespace
	}
	if k.RuntimeClass != nil {
		if len(*k.RuntimeClass) > 253 || !dnsSubdomainRe().MatchString(*k.RuntimeClass) {
			return errf("runtime_class", "%q is not a RuntimeClass name (e.g. \"gvisor\")", *k.RuntimeClass)
		}
		next.RuntimeClass = *k.RuntimeClass
	}
	if k.WorkerImage != nil {
		if !imageRefRe().MatchString(*k.WorkerImage) {
			return errf("worker_image", "%q is not an image reference (`vak session worker-image` writes one)", *k.WorkerImage)
		}
		next.WorkerImage = *k.WorkerImage
	}
	if k.PullPolicy != nil {
		if !slices.Contains(PullPolicies, *k.PullPolicy) {
			return errf("pull_policy", "%q is not one of %s", *k.PullPolicy, strings.Join(PullPolicies, ", "))
		}
		next.PullPolicy = *k.PullPolicy
	}
	if k.GatewayReplicas != nil {
		if *k.GatewayReplicas < 1 || *k.GatewayReplicas > MaxGatewayReplicas {
			return errf("gateway_replicas", "%d is not between 1 and %d", *k.GatewayReplicas, MaxGatewayReplicas)
		}
		next.GatewayReplicas = *k.GatewayReplicas
	}
	c.Kubernetes = next
	return nil
}
