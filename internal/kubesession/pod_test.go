package kubesession

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vak/internal/sandbox"
	"vak/internal/worker"
)

func testSpec() Spec {
	return Spec{ID: SessionID("h", "t", "/work/ws"), Task: "t", Workspace: "/work/ws", Image: "img:1", WorkerImage: "vak.local/worker:1",
		Mode: sandbox.WorkspaceWrite, Limits: sandbox.Limits{Memory: 1 << 30, CPUs: 2}, Env: []string{"LANG=C.UTF-8"},
		IdleTimeout: time.Minute, Lifetime: time.Hour, Created: time.Unix(1700000000, 0), Owner: 1234}
}

// TestPodSecurity: only the fence holds a capability (NET_ADMIN, as root,
// in an init container); everything else runs as the session's uid with
// nothing, no privilege escalation, seccomp RuntimeDefault; no service
// account token, no service links; the worker binary is read-only.
func TestPodSecurity(t *testing.T) {
	p, err := Pod(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		t.Error("service account token or service links not disabled")
	}
	if s.RestartPolicy != corev1.RestartPolicyNever || s.ActiveDeadlineSeconds == nil || *s.ActiveDeadlineSeconds != 3660 {
		t.Errorf("restart policy %s, deadline %v", s.RestartPolicy, s.ActiveDeadlineSeconds)
	}
	if s.HostNetwork || s.HostPID || s.HostIPC || s.ShareProcessNamespace != nil {
		t.Error("host namespaces or a shared process namespace")
	}
	all := append(append([]corev1.Container(nil), s.InitContainers...), s.Containers...)
	if names := containerNames(all); !slices.Equal(names, []string{ContainerFence, ContainerInstall, ContainerSync, ContainerSession}) {
		t.Fatalf("containers %v", names)
	}
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged {
			t.Errorf("%s: privilege escalation or privileged", c.Name)
			continue
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccomp %v", c.Name, sc.SeccompProfile)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: capabilities not all dropped", c.Name)
		}
		if c.Name == ContainerFence {
			if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) || *sc.RunAsUser != 0 || len(c.VolumeMounts) != 0 {
				t.Errorf("fence: adds %v as uid %d with mounts %v", sc.Capabilities.Add, *sc.RunAsUser, c.VolumeMounts)
			}
			continue
		}
		if len(sc.Capabilities.Add) != 0 || sc.RunAsUser == nil || *sc.RunAsUser != sessionID || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: adds %v, runs as %v", c.Name, sc.Capabilities.Add, sc.RunAsUser)
		}
	}
	sess := s.Containers[0]
	for _, m := range sess.VolumeMounts {
		if m.MountPath == BinDir && !m.ReadOnly {
			t.Error("the worker binary's volume is writable in the session container")
		}
	}
	if sess.Resources.Limits.Memory().Value() != 1<<30 || sess.Resources.Limits.Cpu().MilliValue() != 2000 {
		t.Errorf("limits %v", sess.Resources.Limits)
	}
	if s.HostUsers != nil || s.RuntimeClassName != nil {
		t.Error("hostUsers or runtimeClassName set without being asked for")
	}
}

// TestPodOptions: runtime class, user namespace, read-only mode, the
// worker's spec.
func TestPodOptions(t *testing.T) {
	sp := testSpec()
	sp.RuntimeClass, sp.UserNamespace, sp.Mode = "gvisor", true, sandbox.ReadOnly
	p, err := Pod(sp)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "gvisor" || p.Spec.HostUsers == nil || *p.Spec.HostUsers {
		t.Errorf("runtime class %v, hostUsers %v", p.Spec.RuntimeClassName, p.Spec.HostUsers)
	}
	sess := p.Spec.Containers[0]
	if !*sess.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("read-only mode: root filesystem writable")
	}
	for _, m := range sess.VolumeMounts {
		if m.MountPath == sp.Workspace && !m.ReadOnly {
			t.Error("read-only mode: workspace mounted writable")
		}
	}
	var ws worker.Spec
	if err := json.Unmarshal([]byte(sess.Env[0].Value), &ws); err != nil || sess.Env[0].Name != worker.SpecEnv {
		t.Fatalf("worker spec: %v", err)
	}
	if ws.Container == nil || ws.Container.Socket != Socket || !ws.Container.InheritEnv || !ws.Container.Deadline.Equal(sp.Created.Add(time.Hour)) || ws.Workspace != sp.Workspace {
		t.Errorf("worker spec %+v", ws.Container)
	}
	if !slices.Contains(ws.Env, "LANG=C.UTF-8") || !slices.Contains(ws.Env, "HOME="+Home) {
		t.Errorf("worker env %v", ws.Env)
	}
	if l := p.Labels; l[LabelSession] != sp.ID || l[LabelOwner] != "1234" || strings.Contains(l[LabelWorkspace], "/") {
		t.Errorf("labels %v", l)
	}
	np := NetworkPolicy(sp, p)
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 || np.Spec.PodSelector.MatchLabels[LabelPod] != p.Name || p.Labels[LabelPod] != p.Name {
		t.Errorf("network policy %+v", np.Spec)
	}
}

// TestPodWorkspaceRefused: workspaces the pod cannot mount safely.
func TestPodWorkspaceRefused(t *testing.T) {
	for _, ws := range []string{"", "rel", "/", "/.vak", "/.vak/x", "/tmp", "/home/vak", "/home", "/proc/1", "/etc", "/work/../etc", "/work/"} {
		sp := testSpec()
		sp.Workspace = ws
		if _, err := Pod(sp); !errors.Is(err, ErrInvalid) {
			t.Errorf("workspace %q: %v, want ErrInvalid", ws, err)
		}
	}
	for _, ws := range []string{"/work/ws", "/home/user/proj", "/srv/a b", "/tmp/w"} {
		sp := testSpec()
		sp.Workspace = ws
		if _, err := Pod(sp); err != nil {
			t.Errorf("workspace %q refused: %v", ws, err)
		}
	}
}

func TestIDs(t *testing.T) {
	id := SessionID("h", "build.x_1", "/w")
	if !validID(id) || id == SessionID("h", "build.x_1", "/w2") || id == SessionID("other-host", "build.x_1", "/w") {
		t.Fatalf("SessionID %q", id)
	}
	for _, bad := range []string{"", "-0123456789", "a-012345678", "../x-0123456789", "a/b-0123456789", "a-0123456789A", strings.Repeat("a", 41) + "-0123456789"} {
		if validID(bad) {
			t.Errorf("validID(%q)", bad)
		}
	}
	if n := PodName(id); len(n) > 63 || strings.ToLower(n) != n {
		t.Errorf("PodName %q", n)
	}
}

func containerNames(cs []corev1.Container) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return n
}

// TestProxiedPod: with a gateway the fence is a sidecar (an init container
// that keeps running) whose startup probe verifies the rules, holding back
// the rest of the pod; the pod's only DNS server is the gateway; the trust
// files are mounted read-only; the network policy lets egress through to
// the gateway's pods only. Without one, none of that is there.
func TestProxiedPod(t *testing.T) {
	s := testSpec()
	s.Gateway = netip.MustParseAddr("10.96.0.10")
	p, err := Pod(s)
	if err != nil {
		t.Fatal(err)
	}
	f := p.Spec.InitContainers[0]
	if f.Name != ContainerFence || f.RestartPolicy == nil || *f.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("the fence is not a sidecar: %s %v", f.Name, f.RestartPolicy)
	}
	want := []string{imageVak, "netclient", "--pod", "--gateway", "10.96.0.10"}
	if !slices.Equal(f.Command, want) || f.StartupProbe == nil || !slices.Contains(f.StartupProbe.Exec.Command, "--check") {
		t.Errorf("fence command %v, startup probe %v", f.Command, f.StartupProbe)
	}
	if p.Spec.DNSPolicy != corev1.DNSNone || p.Spec.DNSConfig == nil || !slices.Equal(p.Spec.DNSConfig.Nameservers, []string{"10.96.0.10"}) {
		t.Errorf("DNS %s %v", p.Spec.DNSPolicy, p.Spec.DNSConfig)
	}
	sess := p.Spec.Containers[0]
	if !slices.ContainsFunc(sess.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == TrustDir && m.ReadOnly }) {
		t.Errorf("trust files not mounted read-only: %v", sess.VolumeMounts)
	}
	np := NetworkPolicy(s, nil)
	if len(np.Spec.Egress) != 1 || np.Spec.Egress[0].To[0].PodSelector.MatchLabels[LabelKind] != KindGateway {
		t.Errorf("egress %v", np.Spec.Egress)
	}

	plain, err := Pod(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	if f := plain.Spec.InitContainers[0]; f.RestartPolicy != nil || f.Command[1] != FenceCommand || plain.Spec.DNSConfig != nil {
		t.Errorf("a session without a gateway: fence %v %v, DNS %v", f.RestartPolicy, f.Command, plain.Spec.DNSConfig)
	}
	if np := NetworkPolicy(testSpec(), nil); len(np.Spec.Egress) != 0 {
		t.Errorf("a session without a gateway may egress: %v", np.Spec.Egress)
	}
}

// TestGatewayObjects: the gateway runs unprivileged with no capability, no
// service account token, its secret mounted only into it; its Service
// maps DNS to an unprivileged port; only session pods may reach it.
func TestGatewayObjects(t *testing.T) {
	labels := map[string]string{LabelManaged: "true", LabelKind: KindGateway}
	g := GatewaySpec{Payload: []byte("tar"), WorkerImage: "vak.local/worker:1", Session: "s"}
	d := gatewayDeployment(metav1.ObjectMeta{Name: GatewayName}, labels, g, g.hash())
	ps := d.Spec.Template.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("service account token mounted")
	}
	for _, c := range append(append([]corev1.Container(nil), ps.InitContainers...), ps.Containers...) {
		sc := c.SecurityContext
		if *sc.RunAsUser == 0 || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s: security context %+v", c.Name, sc)
		}
	}
	if d.Spec.Template.Annotations[AnnotationGatewayHash] != g.hash() {
		t.Error("the template does not carry the hash (a change would not roll)")
	}
	g2 := g
	g2.Payload = []byte("other")
	if g.hash() == g2.hash() {
		t.Error("the hash ignores the payload")
	}
	if *d.Spec.Replicas != 1 {
		t.Errorf("replicas %d by default, want 1", *d.Spec.Replicas)
	}
	g1, g3 := g, g
	g1.Replicas, g3.Replicas = 1, 3
	if g1.hash() != g.hash() {
		t.Error("an explicit count of 1 changed the digest of a gateway deployed without one")
	}
	if g3.hash() == g.hash() {
		t.Error("the hash ignores the replica count (a change would not apply)")
	}
	if d3 := gatewayDeployment(metav1.ObjectMeta{Name: GatewayName}, labels, g3, g3.hash()); *d3.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *d3.Spec.Replicas)
	}
	svc := gatewayService(metav1.ObjectMeta{Name: GatewayName}, labels)
	for _, p := range svc.Spec.Ports {
		if p.Port == GatewayDNSPort && p.TargetPort.IntValue() != gatewayDNSTarget {
			t.Errorf("DNS port %d -> %v", p.Port, p.TargetPort)
		}
	}
	np := gatewayNetworkPolicy(metav1.ObjectMeta{Name: GatewayName}, labels)
	if len(np.Spec.Ingress) != 1 || np.Spec.Ingress[0].From[0].PodSelector.MatchLabels[LabelKind] != KindSession {
		t.Errorf("gateway ingress %v", np.Spec.Ingress)
	}
}
