package kubesession

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"vak/internal/catrust"
)

// The in-cluster gateway: one per namespace, shared by the proxied
// sessions of that namespace (docs/kubernetes.md "Egress").
//
//   - A Secret (GatewayName) holds the gateway's volume as one tar: its
//     config with the [network], [gateway] and [secrets] of the trusted
//     config of whoever deployed it, the real secret values, the CA key
//     and the receipts key. Only the gateway pod mounts it.
//   - A ConfigMap (GatewayTrustName) holds the public trust files (the CA
//     certificate, the bundle, the Java store); session pods mount it.
//   - A Deployment runs vak's gateway on the worker image, as an
//     unprivileged user with no capability; a Service gives it a stable
//     address, which is what a session pod's fence lets through.
//   - A NetworkPolicy lets only session pods reach it, where the cluster
//     enforces policies.
const (
	GatewayName      = "vak-gateway"
	GatewayTrustName = "vak-gateway-trust"
	KindGateway      = "gateway"
	// ContainerGateway runs the gateway; ContainerUnpack unpacks its
	// volume from the Secret first.
	ContainerGateway = "gateway"
	ContainerUnpack  = "vak-unpack"
	// GatewayDataDir is the gateway's volume in its pod (the same layout
	// as the Docker gateway's: config, state with CA and receipts).
	GatewayDataDir = "/data"
	// GatewayPayloadKey is the Secret's key holding the volume's tar.
	GatewayPayloadKey = "payload.tar"
	// TrustDir is where session pods see the trust files.
	TrustDir = catrust.Dir
	// AnnotationGatewayHash is the digest of what the gateway runs (its
	// volume and image): a change rolls the Deployment.
	AnnotationGatewayHash = "vak.dev/gateway-sha256"
)

// The gateway's ports: the Service's (what session pods' fences let
// through) and the container's.
const (
	GatewayProxyPort       = 3128
	GatewayTransparentPort = 15001
	GatewayDNSPort         = 53
	gatewayDNSTarget       = 5353 // unprivileged inside the gateway pod
	gatewayUID             = 65532
)

// GatewaySpec is what EnsureGateway deploys.
type GatewaySpec struct {
	// Payload is the gateway's volume as a tar (proxynet.GatewayPayload):
	// it holds secret values and keys, and goes only into the Secret.
	Payload []byte
	// Trust are the public trust files (name -> content).
	Trust map[string][]byte
	// WorkerImage holds vak at /vak; PullPolicy as for sessions.
	WorkerImage string
	PullPolicy  corev1.PullPolicy
	// Session names the gateway's receipts.
	Session string
	// Replicas is the number of gateway pods (0 means 1). Each keeps its
	// own receipts log; the Service spreads connections over them.
	Replicas int32
}

// Gateway is a deployed in-cluster gateway.
type Gateway struct {
	// Addr is the Service's cluster IP, the one address session pods reach.
	Addr netip.Addr
	// Hash is the digest of what it runs (AnnotationGatewayHash).
	Hash string
}

func (g GatewaySpec) hash() string {
	h := sha256.New()
	fmt.Fprintf(h, "vak gateway v1\n%s\n%d\n", g.WorkerImage, len(g.Payload))
	if n := g.replicas(); n != 1 {
		// Only a count other than 1 enters, so gateways deployed before
		// the setting existed keep their digest.
		fmt.Fprintf(h, "replicas %d\n", n)
	}
	h.Write(g.Payload)
	for _, k := range slices.Sorted(maps.Keys(g.Trust)) {
		fmt.Fprintf(h, "%s %d\n", k, len(g.Trust[k]))
		h.Write(g.Trust[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// gatewayLabels select the gateway's pods and mark its objects.
func (m *Manager) gatewayLabels() map[string]string {
	l := map[string]string{LabelManaged: "true", LabelKind: KindGateway}
	maps.Copy(l, m.Labels)
	return l
}

// EnsureGateway deploys the namespace's gateway for g, or updates it when
// it runs something else (the Deployment rolls to the new version; the
// placeholders stay, so running sessions keep working), and waits until
// it serves.
func (m *Manager) EnsureGateway(ctx context.Context, g GatewaySpec) (*Gateway, error) {
	c := m.Cluster
	hash := g.hash()
	labels := m.gatewayLabels()
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{AnnotationGatewayHash: hash}}
	}
	sec := &corev1.Secret{ObjectMeta: meta(GatewayName), Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{GatewayPayloadKey: g.Payload}}
	if err := m.apply(ctx, "secrets", sec.Name, hash, sec, &corev1.Secret{}); err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: meta(GatewayTrustName), BinaryData: g.Trust}
	if err := m.apply(ctx, "configmaps", cm.Name, hash, cm, &corev1.ConfigMap{}); err != nil {
		return nil, err
	}
	svc := gatewayService(meta(GatewayName), labels)
	if err := m.apply(ctx, "services", svc.Name, "", svc, &corev1.Service{}); err != nil {
		return nil, err
	}
	np := gatewayNetworkPolicy(meta(GatewayName), labels)
	if err := c.api.networking.Post().Namespace(c.Namespace).Resource("networkpolicies").Body(np).Do(ctx).Error(); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, apiError("create network policy "+c.Namespace+"/"+np.Name, err)
	}
	dep := gatewayDeployment(meta(GatewayName), labels, g, hash)
	if err := m.apply(ctx, "deployments", dep.Name, hash, dep, &appsv1.Deployment{}); err != nil {
		return nil, err
	}
	m.progress("waiting for the gateway %s/%s", c.Namespace, GatewayName)
	if err := m.waitGateway(ctx, hash); err != nil {
		return nil, err
	}
	out := &corev1.Service{}
	if err := c.api.core.Get().Namespace(c.Namespace).Resource("services").Name(GatewayName).Do(ctx).Into(out); err != nil {
		return nil, apiError("get service "+c.Namespace+"/"+GatewayName, err)
	}
	addr, err := netip.ParseAddr(out.Spec.ClusterIP)
	if err != nil || !addr.Is4() {
		return nil, fmt.Errorf("%w: service %s/%s has cluster IP %q; the pod fence needs an IPv4 service address", ErrCluster, c.Namespace, GatewayName, out.Spec.ClusterIP)
	}
	return &Gateway{Addr: addr, Hash: hash}, nil
}

// apply creates obj (a resource of the gateway), or replaces it when its
// AnnotationGatewayHash differs from hash ("" never replaces).
func (m *Manager) apply(ctx context.Context, resource, name, hash string, obj, cur kubeObject) error {
	c := m.Cluster
	rc := c.api.core
	if resource == "deployments" {
		rc = c.api.apps
	}
	what := resource + " " + c.Namespace + "/" + name
	err := rc.Get().Namespace(c.Namespace).Resource(resource).Name(name).Do(ctx).Into(cur)
	switch {
	case apierrors.IsNotFound(err):
		if err := rc.Post().Namespace(c.Namespace).Resource(resource).Body(obj).Do(ctx).Error(); err != nil {
			return apiError("create "+what, err)
		}
		return nil
	case err != nil:
		return apiError("get "+what, err)
	case hash == "" || cur.GetAnnotations()[AnnotationGatewayHash] == hash:
		return nil
	}
	obj.SetResourceVersion(cur.GetResourceVersion())
	if err := rc.Put().Namespace(c.Namespace).Resource(resource).Name(name).Body(obj).Do(ctx).Error(); err != nil {
		return apiError("update "+what, err)
	}
	m.progress("updated %s", what)
	return nil
}

// kubeObject is an API object (the REST client's Body and Into).
type kubeObject interface {
	metav1.Object
	runtime.Object
}

// waitGateway polls the Deployment until its pods of version hash serve
// (available and none of an older version left).
func (m *Manager) waitGateway(ctx context.Context, hash string) error {
	c := m.Cluster
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		d := &appsv1.Deployment{}
		err := c.api.apps.Get().Namespace(c.Namespace).Resource("deployments").Name(GatewayName).Do(ctx).Into(d)
		if err == nil {
			st := d.Status
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			last = fmt.Sprintf("%d/%d available, %d updated, %d total", st.AvailableReplicas, want, st.UpdatedReplicas, st.Replicas)
			if st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.AvailableReplicas >= want && st.Replicas == want &&
				d.Spec.Template.Annotations[AnnotationGatewayHash] == hash {
				return nil
			}
			if err := m.gatewayPodFailure(ctx); err != nil {
				return err
			}
		} else if ctx.Err() == nil && !apierrors.IsNotFound(err) {
			return apiError("get deployment "+c.Namespace+"/"+GatewayName, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the gateway %s/%s did not become available within 2 minutes (%s): kubectl -n %s describe deployment %s", ErrPodFailed, c.Namespace, GatewayName, last, c.Namespace, GatewayName)
		case <-tick.C:
		}
	}
}

// gatewayPodFailure is the error of a gateway pod that cannot start (an
// image that cannot be pulled, a container that keeps failing).
func (m *Manager) gatewayPodFailure(ctx context.Context) error {
	c := m.Cluster
	pods, err := c.api.listPods(ctx, c.Namespace, metav1.ListOptions{LabelSelector: LabelKind + "=" + KindGateway + "," + LabelManaged + "=true"})
	if err != nil {
		return nil
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		for _, st := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if w := st.State.Waiting; w != nil && stuckReasons[w.Reason] {
				return fmt.Errorf("%w: gateway pod %s/%s: container %s cannot start (%s: %s)%s", ErrPodFailed, p.Namespace, p.Name, st.Name, w.Reason, w.Message, imageHint(st.Image, w.Reason))
			}
			if t := st.LastTerminationState.Terminated; t != nil && st.RestartCount >= 2 {
				return fmt.Errorf("%w: gateway pod %s/%s: container %s keeps failing (exit %d): %s", ErrPodFailed, p.Namespace, p.Name, st.Name, t.ExitCode, t.Message)
			}
		}
	}
	return nil
}

func gatewayService(meta metav1.ObjectMeta, sel map[string]string) *corev1.Service {
	port := func(name string, proto corev1.Protocol, p, target int) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: proto, Port: int32(p), TargetPort: intstr.FromInt32(int32(target))}
	}
	return &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{
		Type:     corev1.ServiceTypeClusterIP,
		Selector: map[string]string{LabelManaged: sel[LabelManaged], LabelKind: KindGateway},
		Ports: []corev1.ServicePort{
			port("proxy", corev1.ProtocolTCP, GatewayProxyPort, GatewayProxyPort),
			port("transparent", corev1.ProtocolTCP, GatewayTransparentPort, GatewayTransparentPort),
			port("dns-tcp", corev1.ProtocolTCP, GatewayDNSPort, gatewayDNSTarget),
			port("dns-udp", corev1.ProtocolUDP, GatewayDNSPort, gatewayDNSTarget),
		},
	}}
}

// gatewayNetworkPolicy lets only session pods reach the gateway (its
// egress is its own: it is the way out).
func gatewayNetworkPolicy(meta metav1.ObjectMeta, labels map[string]string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: meta, Spec: networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "true", LabelKind: KindGateway}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "true", LabelKind: KindSession}}}},
			Ports: gatewayPolicyPorts(),
		}},
	}}
}

// gatewayPolicyPorts are the gateway pod's ports (policies see the
// backend's port, after the Service's translation).
func gatewayPolicyPorts() []networkingv1.NetworkPolicyPort {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	p := func(proto *corev1.Protocol, n int) networkingv1.NetworkPolicyPort {
		v := intstr.FromInt32(int32(n))
		return networkingv1.NetworkPolicyPort{Protocol: proto, Port: &v}
	}
	return []networkingv1.NetworkPolicyPort{p(&tcp, GatewayProxyPort), p(&tcp, GatewayTransparentPort), p(&tcp, gatewayDNSTarget), p(&udp, gatewayDNSTarget)}
}

// replicas is the gateway's pod count: Replicas, at least 1.
func (g GatewaySpec) replicas() int32 { return max(g.Replicas, 1) }

func gatewayDeployment(meta metav1.ObjectMeta, labels map[string]string, g GatewaySpec, hash string) *appsv1.Deployment {
	no, yes := false, true
	n := g.replicas()
	sc := &corev1.SecurityContext{
		RunAsUser: ptr(int64(gatewayUID)), RunAsGroup: ptr(int64(gatewayUID)), RunAsNonRoot: &yes,
		AllowPrivilegeEscalation: &no, Privileged: &no, ReadOnlyRootFilesystem: &yes,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	data := corev1.VolumeMount{Name: "data", MountPath: GatewayDataDir}
	cfg := GatewayDataDir + "/gateway.toml"
	state := GatewayDataDir + "/vak"
	// No --require-no-forwarding: a pod's network namespace forwards by
	// default and a pod cannot turn it off without an unsafe sysctl; the
	// gateway pod has one interface, and what its forwarding could route
	// comes only from pods that can change their own routes (NET_ADMIN),
	// which a session's workload never has.
	cmd := []string{imageVak, "gateway", "--gateway-config", cfg,
		"--listen", "0.0.0.0:" + strconv.Itoa(GatewayProxyPort),
		"--transparent", "0.0.0.0:" + strconv.Itoa(GatewayTransparentPort),
		"--dns", "0.0.0.0:" + strconv.Itoa(gatewayDNSTarget),
		"--session", g.Session}
	podLabels := map[string]string{LabelManaged: "true", LabelKind: KindGateway}
	maps.Copy(podLabels, labels)
	mode := int32(0o440)
	return &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
		Replicas: &n,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "true", LabelKind: KindGateway}},
		Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: map[string]string{AnnotationGatewayHash: hash}},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: &no,
				EnableServiceLinks:           &no,
				SecurityContext: &corev1.PodSecurityContext{
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					FSGroup:        ptr(int64(gatewayUID)),
				},
				InitContainers: []corev1.Container{{
					Name: ContainerUnpack, Image: g.WorkerImage, ImagePullPolicy: g.PullPolicy,
					Command:                  []string{imageVak, UntarCommand, "--input", "/payload/" + GatewayPayloadKey, GatewayDataDir},
					SecurityContext:          sc,
					VolumeMounts:             []corev1.VolumeMount{data, {Name: "payload", MountPath: "/payload", ReadOnly: true}},
					TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				}},
				Containers: []corev1.Container{{
					Name: ContainerGateway, Image: g.WorkerImage, ImagePullPolicy: g.PullPolicy,
					Command:                  cmd,
					Env:                      []corev1.EnvVar{{Name: "XDG_STATE_HOME", Value: GatewayDataDir}, {Name: "HOME", Value: GatewayDataDir}},
					SecurityContext:          sc,
					VolumeMounts:             []corev1.VolumeMount{data},
					TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					Ports: []corev1.ContainerPort{
						{Name: "proxy", ContainerPort: GatewayProxyPort, Protocol: corev1.ProtocolTCP},
						{Name: "transparent", ContainerPort: GatewayTransparentPort, Protocol: corev1.ProtocolTCP},
						{Name: "dns-tcp", ContainerPort: gatewayDNSTarget, Protocol: corev1.ProtocolTCP},
						{Name: "dns-udp", ContainerPort: gatewayDNSTarget, Protocol: corev1.ProtocolUDP},
					},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{imageVak, "gateway", "status", "--socket", state + "/gateway.sock"}}},
						PeriodSeconds: 2, FailureThreshold: 2,
					},
					Resources: corev1.ResourceRequirements{
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi"), corev1.ResourceCPU: resource.MustParse("2")},
						Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("100m")},
					},
				}},
				Volumes: []corev1.Volume{
					emptyDir("data", corev1.StorageMediumMemory, resource.NewQuantity(64<<20, resource.BinarySI)),
					{Name: "payload", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: GatewayName, DefaultMode: &mode}}},
				},
			},
		},
	}}
}
