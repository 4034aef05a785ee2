//go:build kubernetes

package kubesession

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vak/internal/sandbox"
	"vak/internal/testenv/kubetest"
)

// TestAPIServerAcceptsSessionObjects: a real API server validates and
// stores the session pod and its network policy as built (every security
// field kept), and a namespace whose Pod Security level is "baseline"
// refuses the pod with an error that says what to do.
func TestAPIServerAcceptsSessionObjects(t *testing.T) {
	env := kubetest.APIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The RuntimeClass a cluster with gVisor would have (cluster-scoped:
	// named after the test's namespace, removed at cleanup).
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: env.Namespace + "-gvisor", Labels: kubetest.Labels(t)}, Handler: "runsc"}
	if _, err := env.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.Client.NodeV1().RuntimeClasses().Delete(context.Background(), rc.Name, metav1.DeleteOptions{})
	})
	sp := Spec{ID: SessionID("api", "/work/ws"), Task: "api", Workspace: "/work/ws", Image: "img:1", WorkerImage: "vak.local/worker:1",
		PullPolicy: corev1.PullNever, Mode: sandbox.WorkspaceWrite, RuntimeClass: rc.Name, UserNamespace: true,
		Lifetime: time.Hour, Created: time.Now(), Labels: kubetest.Labels(t)}
	pod, err := Pod(sp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refused the session pod: %v", err)
	}
	if *got.Spec.AutomountServiceAccountToken || got.Spec.InitContainers[0].SecurityContext.Capabilities.Add[0] != "NET_ADMIN" ||
		*got.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation || *got.Spec.HostUsers || *got.Spec.RuntimeClassName != rc.Name {
		t.Errorf("stored pod lost a security field: %+v", got.Spec)
	}
	if _, err := env.Client.NetworkingV1().NetworkPolicies(env.Namespace).Create(ctx, NetworkPolicy(sp, got), metav1.CreateOptions{}); err != nil {
		t.Fatalf("network policy: %v", err)
	}

	// A baseline namespace: Manager.Create fails with the hint.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: env.Namespace + "-baseline", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "baseline"}}}
	for k, v := range kubetest.Labels(t) {
		ns.Labels[k] = v
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	m := &Manager{Cluster: &Cluster{Config: env.Config, Client: env.Client, Namespace: ns.Name}, StateDir: t.TempDir(), Labels: kubetest.Labels(t)}
	sp2 := sp
	sp2.ID, sp2.RuntimeClass, sp2.UserNamespace = "", "", false
	_, err = m.Create(ctx, sp2, nil)
	if !errors.Is(err, ErrCluster) || !strings.Contains(err.Error(), "pod-security.kubernetes.io/enforce=privileged") {
		t.Fatalf("create in a baseline namespace: %v", err)
	}
}
