//go:build kubernetes

package kubesession

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vak/internal/engine"
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
	sp := Spec{ID: SessionID("h", "api", "/work/ws"), Task: "api", Workspace: "/work/ws", Image: "img:1", WorkerImage: "vak.local/worker:1",
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
	m := &Manager{Cluster: mustCluster(t, env.Config, ns.Name), StateDir: t.TempDir(), Labels: kubetest.Labels(t)}
	sp2 := sp
	sp2.ID, sp2.RuntimeClass, sp2.UserNamespace = "", "", false
	_, err = m.Create(ctx, sp2, nil)
	if !errors.Is(err, ErrCluster) || !strings.Contains(err.Error(), "pod-security.kubernetes.io/enforce=privileged") {
		t.Fatalf("create in a baseline namespace: %v", err)
	}
}

// TestAPIServerGC: gc removes the pods of this host whose owner (a held
// create) is gone and those it has no record of, and keeps a pod whose
// owner lives (the control) and one with a record and no owner; pods of
// another host are not this host's to collect.
func TestAPIServerGC(t *testing.T) {
	env := kubetest.APIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &Manager{Cluster: mustCluster(t, env.Config, env.Namespace), StateDir: t.TempDir(), Labels: kubetest.Labels(t)}
	dead := exec.Command("sleep", "60")
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	deadTok, err := engine.OwnerToken(dead.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	dead.Process.Kill()
	dead.Wait()
	liveTok, err := engine.OwnerToken(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	hid, err := m.hostID()
	if err != nil {
		t.Fatal(err)
	}
	mk := func(task, owner string, withRecord bool, host string) string {
		if host == "" {
			host = hid
		}
		sp := Spec{Task: task, Workspace: "/work/ws", Image: "img:1", WorkerImage: "vak.local/worker:1", Lifetime: time.Hour,
			Created: time.Now(), Owner: os.Getuid(), Labels: m.Labels, OwnerProc: owner, HostID: host}
		sp.ID = SessionID(host, task, sp.Workspace)
		pod, err := Pod(sp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if withRecord {
			if err := m.writeRecord(&record{ID: sp.ID, Task: task, Workspace: sp.Workspace, Namespace: env.Namespace, Pod: pod.Name, Created: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		return sp.ID
	}
	gone := mk("ownergone", deadTok, true, "")
	alive := mk("ownerlives", liveTok, true, "")
	kept := mk("recorded", "", true, "")
	orphan := mk("norecord", "", false, "")
	elsewhere := mk("otherhost", deadTok, false, "another-host")
	removed, err := m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range removed {
		got[r.ID] = r.Reason
	}
	if !strings.Contains(got[gone], "owner") || !strings.Contains(got[orphan], "orphaned") || len(got) != 2 {
		t.Fatalf("gc removed %v; want %s (owner gone) and %s (orphan) only, not %s, %s, %s", got, gone, orphan, alive, kept, elsewhere)
	}
}

// TestAPIServerCreateNeverTakesAPod: a create whose pod name is taken by a
// pod it did not make (another host's, a record lost) fails with
// ErrSessionExists and leaves that pod alone; a create of a session that
// has a record here stops before the API is asked anything.
func TestAPIServerCreateNeverTakesAPod(t *testing.T) {
	env := kubetest.APIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &Manager{Cluster: mustCluster(t, env.Config, env.Namespace), StateDir: t.TempDir(), Labels: kubetest.Labels(t), StartTimeout: 20 * time.Second}
	hid, err := m.hostID()
	if err != nil {
		t.Fatal(err)
	}
	sp := Spec{Task: "taken", Workspace: "/work/ws", Image: "img:1", WorkerImage: "vak.local/worker:1", Lifetime: time.Hour}
	id := SessionID(hid, sp.Task, sp.Workspace)
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: PodName(id), Labels: kubetest.Labels(t)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "someone-elses:1"}}}}
	if _, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, sp, nil); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("create over a foreign pod: %v, want ErrSessionExists", err)
	}
	if p, err := env.Client.CoreV1().Pods(env.Namespace).Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != "someone-elses:1" {
		t.Fatalf("the foreign pod was touched: %v", err)
	}
	if m.hasRecord(id) {
		t.Error("the failed create left its record")
	}
	// A record here: the create stops at once.
	if err := m.createRecord(&record{ID: id, Task: sp.Task, Workspace: sp.Workspace, Namespace: env.Namespace, Pod: PodName(id), Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, sp, nil); !errors.Is(err, ErrSessionExists) || errors.Is(err, errPodNotOurs) {
		t.Fatalf("create of a recorded session: %v", err)
	}
	if !m.hasRecord(id) {
		t.Error("the refused create removed the existing record")
	}
}

// TestAPIServerPoolClaim: a filled pool pod is claimed by exactly one of
// two racing creates (the other gets none and would make a pod of its
// own); the claimed pod is the session's (labels, network policy kept);
// a second fill makes one pod again, since the claimed one left the pool;
// a spec that differs in anything fixed at creation has another key.
func TestAPIServerPoolClaim(t *testing.T) {
	env := kubetest.APIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &Manager{Cluster: mustCluster(t, env.Config, env.Namespace), StateDir: t.TempDir(), Labels: kubetest.Labels(t), Pool: true, Progress: os.Stderr}
	base := Spec{Task: "pool", Workspace: "/work/ws", Image: "img:1", WorkerImage: "vak.local/worker:1", Lifetime: time.Hour}
	if n, err := m.FillPool(ctx, base, 1); err != nil || n != 1 {
		t.Fatalf("fill: %d, %v", n, err)
	}
	if n, err := m.FillPool(ctx, base, 1); err != nil || n != 0 {
		t.Fatalf("a full pool filled again: %d, %v", n, err)
	}
	got := make([]string, 2)
	var wg sync.WaitGroup
	for i := range got {
		sp := base
		sp.Task = fmt.Sprintf("racer%d", i)
		if err := m.prepare(&sp); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { got[i] = m.claim(ctx, sp) })
	}
	wg.Wait()
	if (got[0] == "") == (got[1] == "") {
		t.Fatalf("claims %q: want exactly one", got)
	}
	name := got[0] + got[1]
	p, err := env.Client.CoreV1().Pods(env.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[LabelKind] != KindSession || !strings.HasPrefix(p.Labels[LabelTask], "racer") || p.Labels[LabelPod] != name || p.Labels[LabelPoolKey] != "" {
		t.Errorf("claimed pod's labels %v", p.Labels)
	}
	if n, err := m.FillPool(ctx, base, 1); err != nil || n != 1 {
		t.Fatalf("refill after a claim: %d, %v", n, err)
	}
	k1, _ := PoolKey(base)
	other := base
	other.Env = []string{"X=1"}
	k2, _ := PoolKey(other)
	renamed := base
	renamed.Task = "another"
	k3, _ := PoolKey(renamed)
	if k1 == k2 || k1 != k3 {
		t.Errorf("pool keys: base %s, other env %s, other task %s", k1, k2, k3)
	}
}
