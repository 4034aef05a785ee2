package kubesession

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Probe is what a cluster offers sessions, read from its API (no pod is
// started): `vak doctor` prints it and Create follows it.
type Probe struct {
	// Server is the API server's version.
	Server string
	// Namespace is where sessions go; PodSecurity its enforced Pod
	// Security level ("" when unlabelled: privileged).
	Namespace, PodSecurity string
	// Handler is the runtime handler of the configured RuntimeClass (""
	// for the nodes' default runtime).
	Handler string
	// UserNamespaces says every node's runtime handler reports support
	// for user namespaces (node.status.runtimeHandlers), so session pods
	// run with hostUsers: false; Why says which node does not, otherwise.
	UserNamespaces bool
	Why            string
}

// ProbeCluster reads what c offers sessions with runtimeClass ("": the
// default runtime). Its errors wrap ErrCluster.
func ProbeCluster(ctx context.Context, c *Cluster, runtimeClass string) (*Probe, error) {
	p := &Probe{Namespace: c.Namespace}
	v, err := c.api.serverVersion(ctx)
	if err != nil {
		return nil, apiError("server version ("+c.Describe()+")", err)
	}
	p.Server = v.GitVersion
	if ns, err := c.api.getNamespace(ctx, c.Namespace); err == nil {
		p.PodSecurity = ns.Labels["pod-security.kubernetes.io/enforce"]
	}
	if runtimeClass != "" {
		rc, err := c.api.getRuntimeClass(ctx, runtimeClass)
		if err != nil {
			return nil, apiError("runtime class "+runtimeClass+" (kubernetes.runtime_class)", err)
		}
		p.Handler = rc.Handler
	}
	nodes, err := c.api.listNodes(ctx)
	if err != nil {
		// A namespaced user may not list nodes: say so, assume no support.
		p.Why = "cannot read the nodes' runtime features: " + err.Error()
		return p, nil
	}
	var without []string
	for _, n := range nodes.Items {
		i := slices.IndexFunc(n.Status.RuntimeHandlers, func(h corev1.NodeRuntimeHandler) bool { return h.Name == p.Handler })
		if i < 0 || n.Status.RuntimeHandlers[i].Features == nil || n.Status.RuntimeHandlers[i].Features.UserNamespaces == nil || !*n.Status.RuntimeHandlers[i].Features.UserNamespaces {
			without = append(without, n.Name)
		}
	}
	switch {
	case len(nodes.Items) == 0:
		p.Why = "the cluster has no nodes"
	case len(without) > 0:
		p.Why = fmt.Sprintf("the runtime of node(s) %s does not report user namespace support (node.status.runtimeHandlers; containerd 2.0+ or CRI-O 1.25+ on Linux 6.3+ do): session pods share the node's user IDs", strings.Join(without, ", "))
	default:
		p.UserNamespaces = true
	}
	return p, nil
}

// Describe is the probe as doctor's one line.
func (p *Probe) Describe() string {
	ps := p.PodSecurity
	if ps == "" {
		ps = "unset (privileged)"
	}
	userns := "user namespaces: yes (hostUsers: false)"
	if !p.UserNamespaces {
		userns = "user namespaces: no: " + p.Why
	}
	rt := "default runtime"
	if p.Handler != "" {
		rt = "runtime handler " + p.Handler
	}
	return fmt.Sprintf("server %s, namespace %s (pod security %s), %s; %s", p.Server, p.Namespace, ps, rt, userns)
}
