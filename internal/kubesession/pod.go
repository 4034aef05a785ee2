package kubesession

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vak/internal/hostenv"
	"vak/internal/netpolicy"
	"vak/internal/sandbox"
	"vak/internal/worker"
)

// Paths inside a session pod (the same as in a Docker session container).
const (
	VakDir    = "/.vak"
	BinDir    = VakDir + "/bin"
	Worker    = BinDir + "/vak"
	RunDir    = VakDir + "/run"
	Socket    = RunDir + "/worker.sock"
	Home      = "/home/vak"
	imageVak  = "/vak" // the worker image's binary
	sessionID = 1000   // uid and gid of the session's processes
)

// Hidden vak commands the pod's init containers run.
const (
	FenceCommand = "__pod-fence"
	UntarCommand = "__untar"
	TarCommand   = "__tar"
)

// Spec is one session pod.
type Spec struct {
	ID, Task, Workspace string
	// Image is the session image; WorkerImage the image holding the static
	// vak at /vak (WorkerImage's tag for this binary by default).
	Image, WorkerImage string
	PullPolicy         corev1.PullPolicy
	// RuntimeClass is the pods' runtimeClassName ("": the cluster's default).
	RuntimeClass string
	Mode         sandbox.Mode
	Limits       sandbox.Limits
	// Env is the commands' base environment from the host (allowlisted
	// KEY=VALUE); the image's own environment is inherited inside.
	Env            []string
	Protected      []string
	DefaultTimeout time.Duration
	// IdleTimeout and Lifetime end the session (the worker ends it; the
	// pod's activeDeadlineSeconds is the cluster's backstop).
	IdleTimeout, Lifetime time.Duration
	Created               time.Time
	// Owner is the host uid that created the session.
	Owner int
	// Labels are added to every object (tests: vak.test=1).
	Labels map[string]string
	// UserNamespace runs the pod in a user namespace (hostUsers: false).
	UserNamespace bool
	// HostID is the creating host's identity (AnnotationHostID).
	HostID string
	// OwnerProc is the owning process's token (engine.OwnerToken), if the
	// session is held: gc removes it once that process is gone.
	OwnerProc string
	// Gateway, when valid, makes the session proxied: the address of the
	// namespace's gateway Service (EnsureGateway), the only destination
	// its fence lets through. Env then holds the trust variables (files
	// under TrustDir) and the secret placeholders.
	Gateway netip.Addr
	// From is the key of the snapshot (Manager.Snapshot) whose home the
	// session starts with; Image is then the snapshot's.
	From string
}

// policyDigest is a digest of what a session of s may do (its backend,
// network and mode), kept in its record: part of its snapshots' keys.
func policyDigest(s Spec) string {
	network := netpolicy.None
	if s.Gateway.IsValid() {
		network = netpolicy.Proxied
	}
	h := sha256.Sum256(fmt.Appendf(nil, "backend=kubernetes\nnetwork=%s\nmode=%s\n", network, s.Mode))
	return hex.EncodeToString(h[:8])
}

// reservedDirs are paths a workspace may not be at or under: the pod's own
// mounts and the kernel's filesystems.
var reservedDirs = []string{VakDir, Home, "/tmp", "/proc", "/sys", "/dev", "/etc", "/run", "/var/run"}

// checkWorkspace refuses a workspace path the pod cannot mount.
func checkWorkspace(ws string) error {
	if !filepath.IsAbs(ws) || filepath.Clean(ws) != ws || ws == "/" {
		return fmt.Errorf("%w: workspace %q must be a clean absolute path other than /", ErrInvalid, ws)
	}
	for _, r := range reservedDirs {
		// A workspace below /tmp is mounted over the pod's /tmp (mounts
		// are made parents first), as in a Docker session.
		below := strings.HasPrefix(ws, r+"/") && r != "/tmp"
		if ws == r || below || strings.HasPrefix(r, ws+"/") {
			return fmt.Errorf("%w: workspace %q overlaps %s, which a session pod uses itself", ErrInvalid, ws, r)
		}
	}
	return nil
}

// Pod builds the session pod of s (pure: no API call).
func Pod(s Spec) (*corev1.Pod, error) {
	if err := checkWorkspace(s.Workspace); err != nil {
		return nil, err
	}
	if s.Image == "" || s.WorkerImage == "" {
		return nil, fmt.Errorf("%w: a session pod needs an image and a worker image", ErrInvalid)
	}
	specJSON, err := workerSpec(s)
	if err != nil {
		return nil, err
	}
	l := s.Limits.WithDefaults()
	ro := s.Mode == sandbox.ReadOnly
	grace := int64(5)
	deadline := int64((s.Lifetime + time.Minute) / time.Second)
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   PodName(s.ID),
			Labels: podLabels(s),
			Annotations: map[string]string{
				AnnotationWorkspace: s.Workspace,
				AnnotationHost:      hostname(),
				AnnotationCreated:   s.Created.UTC().Format(time.RFC3339),
				AnnotationHostID:    s.HostID,
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			ActiveDeadlineSeconds:         &deadline,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				FSGroup:        ptr(int64(sessionID)),
			},
			InitContainers: []corev1.Container{
				fenceContainer(s),
				initContainer(ContainerInstall, s, []string{imageVak, worker.InstallCommand, Worker}, unprivileged(true),
					corev1.VolumeMount{Name: "vak-bin", MountPath: BinDir}),
				syncContainer(s),
			},
			Containers: []corev1.Container{{
				Name:            ContainerSession,
				Image:           s.Image,
				ImagePullPolicy: s.PullPolicy,
				Command:         []string{Worker, "__worker", "--container"},
				WorkingDir:      s.Workspace,
				Env: []corev1.EnvVar{
					{Name: worker.SpecEnv, Value: string(specJSON)},
					{Name: "HOME", Value: Home},
					{Name: "TMPDIR", Value: "/tmp"},
				},
				SecurityContext: unprivileged(ro),
				Resources:       resources(l),
				VolumeMounts: []corev1.VolumeMount{
					{Name: "vak-bin", MountPath: BinDir, ReadOnly: true},
					{Name: "vak-run", MountPath: RunDir},
					{Name: "workspace", MountPath: s.Workspace, ReadOnly: ro},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "home", MountPath: Home},
				},
			}},
			Volumes: []corev1.Volume{
				emptyDir("vak-bin", corev1.StorageMediumDefault, nil),
				emptyDir("vak-run", corev1.StorageMediumMemory, resource.NewQuantity(1<<20, resource.BinarySI)),
				emptyDir("workspace", corev1.StorageMediumDefault, nil),
				emptyDir("tmp", corev1.StorageMediumMemory, resource.NewQuantity(l.TmpfsSize, resource.BinarySI)),
				emptyDir("home", corev1.StorageMediumDefault, nil),
			},
		},
	}
	if s.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = &s.RuntimeClass
	}
	if s.OwnerProc != "" {
		pod.Annotations[AnnotationOwnerProc] = s.OwnerProc
	}
	if s.UserNamespace {
		pod.Spec.HostUsers = &no
	}
	if s.Gateway.IsValid() {
		proxied(pod, s)
	}
	return pod, nil
}

// fenceContainer is the pod's first init container: the fence. Without a
// gateway it runs once (`vak __pod-fence none`: nothing but loopback).
// With one it is a sidecar (an init container that keeps running) doing
// what a Docker session's netclient does: its rules send every TCP
// connection to its forwarder, which relays it to the gateway, and DNS to
// the gateway; everything else is dropped. Its startup probe holds the
// rest of the pod back until the rules are verified and its self-test
// passed; it re-verifies them and exits if they change (the forwarder
// goes with it: connections fail, none gets out).
func fenceContainer(s Spec) corev1.Container {
	if !s.Gateway.IsValid() {
		return initContainer(ContainerFence, s, []string{imageVak, FenceCommand, "none"}, rootNetAdmin())
	}
	flags := []string{"--pod", "--gateway", s.Gateway.String()}
	c := initContainer(ContainerFence, s, append([]string{imageVak, "netclient"}, flags...), rootNetAdmin(),
		corev1.VolumeMount{Name: "fence-run", MountPath: "/run"})
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	c.StartupProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: append([]string{imageVak, "netclient", "--check"}, flags...)}},
		PeriodSeconds: 1, FailureThreshold: 60, TimeoutSeconds: 5,
	}
	c.LivenessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: append([]string{imageVak, "netclient", "--check"}, flags...)}},
		PeriodSeconds: 10, FailureThreshold: 1, TimeoutSeconds: 5,
	}
	return c
}

// proxied adds what a proxied session pod has besides its fence: the
// gateway as its only DNS server, and the public trust files.
func proxied(pod *corev1.Pod, s Spec) {
	ps := &pod.Spec
	ps.DNSPolicy = corev1.DNSNone
	ps.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{s.Gateway.String()}}
	ps.Volumes = append(ps.Volumes,
		emptyDir("fence-run", corev1.StorageMediumMemory, resource.NewQuantity(1<<20, resource.BinarySI)),
		corev1.Volume{Name: "trust", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: GatewayTrustName}}}})
	for i := range ps.Containers {
		ps.Containers[i].VolumeMounts = append(ps.Containers[i].VolumeMounts, corev1.VolumeMount{Name: "trust", MountPath: TrustDir, ReadOnly: true})
	}
}

// workerSpec is the session worker's spec (worker.SpecEnv).
func workerSpec(s Spec) ([]byte, error) {
	env := hostenv.WithDefaultPath(append([]string(nil), s.Env...))
	env = hostenv.Set(env, "HOME="+Home)
	env = hostenv.Set(env, "TMPDIR=/tmp")
	w := worker.Spec{
		Backend:        worker.BackendContainer,
		Workspace:      s.Workspace,
		Mode:           s.Mode,
		Env:            env,
		Protected:      s.Protected,
		DefaultTimeout: s.DefaultTimeout,
		Container: &worker.ContainerSpec{
			Socket:      Socket,
			IdleTimeout: s.IdleTimeout,
			Deadline:    s.Created.Add(s.Lifetime),
			InheritEnv:  true,
		},
	}
	return w.Encode()
}

// podLabels are the labels of s's pod and network policy.
func podLabels(s Spec) map[string]string {
	l := map[string]string{
		LabelManaged:   "true",
		LabelKind:      KindSession,
		LabelPod:       PodName(s.ID),
		LabelSession:   s.ID,
		LabelOwner:     strconv.Itoa(s.Owner),
		LabelTask:      s.Task,
		LabelWorkspace: workspaceLabel(s.Workspace),
	}
	maps.Copy(l, s.Labels)
	return l
}

// initContainer is one of the pod's init containers, on the worker image.
func initContainer(name string, s Spec, cmd []string, sc *corev1.SecurityContext, mounts ...corev1.VolumeMount) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           s.WorkerImage,
		ImagePullPolicy: s.PullPolicy,
		Command:         cmd,
		SecurityContext: sc,
		VolumeMounts:    mounts,
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceCPU: resource.MustParse("1")},
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("50m")},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// syncContainer receives the workspace on its stdin (attached once) and
// unpacks it onto the workspace volume, then the home of the snapshot the
// session starts from (an empty stream when there is none) onto the home
// volume.
func syncContainer(s Spec) corev1.Container {
	c := initContainer(ContainerSync, s, []string{imageVak, UntarCommand, "--next", Home, s.Workspace}, unprivileged(true),
		corev1.VolumeMount{Name: "workspace", MountPath: s.Workspace}, corev1.VolumeMount{Name: "home", MountPath: Home})
	c.Stdin, c.StdinOnce = true, true
	return c
}

// unprivileged is the security context of every container but the fence:
// the session's uid, no capability, no privilege escalation.
func unprivileged(readOnlyRoot bool) *corev1.SecurityContext {
	no := false
	yes := true
	return &corev1.SecurityContext{
		RunAsUser:                ptr(int64(sessionID)),
		RunAsGroup:               ptr(int64(sessionID)),
		RunAsNonRoot:             &yes,
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		ReadOnlyRootFilesystem:   &readOnlyRoot,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// rootNetAdmin is the fence's security context: root with NET_ADMIN only,
// which it needs to install nftables rules in the pod's network namespace.
func rootNetAdmin() *corev1.SecurityContext {
	no := false
	yes := true
	return &corev1.SecurityContext{
		RunAsUser:                ptr(int64(0)),
		RunAsNonRoot:             &no,
		AllowPrivilegeEscalation: &no,
		Privileged:               &no,
		ReadOnlyRootFilesystem:   &yes,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// resources are the session container's limits (the session's) and
// requests (a quarter of them: sessions idle most of the time; the limits
// bound a busy one).
func resources(l sandbox.Limits) corev1.ResourceRequirements {
	milli := int64(l.CPUs * 1000)
	return corev1.ResourceRequirements{
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: *resource.NewQuantity(l.Memory, resource.BinarySI),
			corev1.ResourceCPU:    *resource.NewMilliQuantity(milli, resource.DecimalSI),
		},
		Requests: corev1.ResourceList{
			corev1.ResourceMemory: *resource.NewQuantity(l.Memory/4, resource.BinarySI),
			corev1.ResourceCPU:    *resource.NewMilliQuantity(max(milli/4, 10), resource.DecimalSI),
		},
	}
}

func emptyDir(name string, medium corev1.StorageMedium, size *resource.Quantity) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium, SizeLimit: size}}}
}

// NetworkPolicy denies the session pod every ingress and egress but, when
// it is proxied, egress to the gateway's pods, where the cluster's network
// plugin enforces policies (the fence does regardless).
//
// It selects its pod by the pod's name (LabelPod), which, unlike the
// session label, a warm pod claimed from the pool keeps.
func NetworkPolicy(s Spec, owner *corev1.Pod) *networkingv1.NetworkPolicy {
	name := PodName(s.ID)
	if owner != nil && owner.Name != "" {
		name = owner.Name
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: podLabels(s)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelPod: name, LabelManaged: "true"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	if s.Gateway.IsValid() {
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: "true", LabelKind: KindGateway}}}},
			Ports: gatewayPolicyPorts(),
		}}
	}
	if owner != nil && owner.UID != "" {
		np.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID}}
	}
	return np
}

func ptr[T any](v T) *T { return &v }
