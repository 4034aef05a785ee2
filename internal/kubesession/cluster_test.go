//go:build kubernetes

package kubesession

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vak/internal/sandbox"
	"vak/internal/testenv"
	"vak/internal/testenv/kubetest"
	"vak/internal/worker/wire"
	"vak/internal/wsync"
)

// These tests run sessions on the real test cluster (scripts/k8s/up.sh;
// VAK_TEST_KUBECONFIG). They need root to load vak's worker image into
// the cluster's containerd (scripts/k8s/load-image.sh).

// workerImage loads the worker image of a freshly built static vak into
// the test cluster.
func workerImage(t *testing.T) string {
	t.Helper()
	vak := testenv.Vak(t)
	return kubetest.LoadArchive(t, func(w io.Writer) (string, error) { return WriteWorkerImage(w, vak) })
}

type clusterFixture struct {
	env *kubetest.Env
	m   *Manager
	ref string
}

func newClusterFixture(t *testing.T) *clusterFixture {
	env := kubetest.Cluster(t)
	ref := workerImage(t)
	m := &Manager{
		Cluster:  mustCluster(t, env.Config, env.Namespace),
		StateDir: t.TempDir(),
		Labels:   kubetest.Labels(t),
	}
	return &clusterFixture{env: env, m: m, ref: ref}
}

func (f *clusterFixture) spec(task, ws string, mode sandbox.Mode) Spec {
	return Spec{Task: task, Workspace: ws, Image: kubetest.BusyboxImage, WorkerImage: f.ref,
		PullPolicy: corev1.PullNever, Mode: mode, Limits: sandbox.Limits{Memory: 256 << 20, CPUs: 1},
		Protected: []string{".git"}, IdleTimeout: 10 * time.Minute, Lifetime: 30 * time.Minute}
}

func packDir(dir string) Pack {
	return func(w io.Writer) error {
		_, err := wsync.Pack(w, dir, wsync.PackOptions{})
		return err
	}
}

// run runs a command in s and returns its stdout, stderr and exit code.
func run(t *testing.T, s *Session, cmd string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Exec(ctx, wire.BashArgs{Command: cmd, TimeoutMS: 30000}, nil)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return res.Stdout, res.Stderr, res.ExitCode
}

// nodeIP is the test node's InternalIP: reachable from an unfenced pod.
func nodeIP(t *testing.T, env *kubetest.Env) string {
	nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatal("the node has no InternalIP")
	return ""
}

// TestClusterSession is a session's life on the real cluster: create with
// the workspace uploaded, commands over one relay stream, the fence (with
// an unfenced pod as the positive control), a workload that tries to undo
// the fence, ls, rm and the collection of an orphaned pod.
func TestClusterSession(t *testing.T) {
	f := newClusterFixture(t)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hello from the host\n"), 0o644)
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	start := time.Now()
	s, err := f.m.Create(ctx, f.spec("e2e", ws, sandbox.WorkspaceWrite), packDir(ws))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer s.Close()
	t.Logf("create to ready: %v (pod %s)", time.Since(start), s.Pod())

	if out, _, code := run(t, s, "cat hello.txt && sub/run.sh && id -u && pwd"); code != 0 || out != "hello from the host\nran\n1000\n"+ws+"\n" {
		t.Fatalf("workspace in the pod: exit %d, %q", code, out)
	}
	// One stream, many commands: each a round trip.
	t0 := time.Now()
	for i := range 5 {
		if _, _, code := run(t, s, "true"); code != 0 {
			t.Fatalf("round trip %d: exit %d", i, code)
		}
	}
	t.Logf("round trip on the relay stream: %v", time.Since(t0)/5)

	// The fence's receipt was kept and says every check passed.
	var rcpt struct {
		Checks []struct {
			Name string
			OK   bool
		}
	}
	if err := json.Unmarshal([]byte(s.FenceReceipt()), &rcpt); err != nil || len(rcpt.Checks) == 0 {
		t.Fatalf("fence receipt %q: %v", s.FenceReceipt(), err)
	}
	for _, c := range rcpt.Checks {
		if !c.OK {
			t.Errorf("fence self-test check %s failed: %s", c.Name, s.FenceReceipt())
		}
	}

	// The egress matrix from inside: nothing but loopback.
	ip := nodeIP(t, f.env)
	probe := "nc -w 3 " + ip + " 10250 </dev/null && echo CONNECTED; nc -u -w 2 " + ip + " 53 </dev/null; ping -c 1 -W 2 " + ip + " && echo PINGED; true"
	if out, errOut, _ := run(t, s, probe); strings.Contains(out, "CONNECTED") || strings.Contains(out, "PINGED") {
		t.Fatalf("the fenced session reached the node %s: %q %q", ip, out, errOut)
	}
	// Positive control: an unfenced pod in the same namespace reaches it.
	control(t, f.env, "nc -w 3 "+ip+" 10250 </dev/null && echo CONNECTED", "CONNECTED")

	// The workload tries to undo the fence: it has no NET_ADMIN.
	if out, errOut, code := run(t, s, Worker+" __pod-fence none --receipt /tmp/r.json"); code == 0 {
		t.Fatalf("the workload re-ran the fence as uid 1000 (exit 0): %q %q", out, errOut)
	}
	if out, _, _ := run(t, s, probe); strings.Contains(out, "CONNECTED") {
		t.Fatalf("after the workload's attempt the node is reachable: %q", out)
	}

	// ls, a second connection, rm.
	list, err := f.m.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != s.ID() || list[0].Workspace != ws {
		t.Fatalf("List: %+v, %v", list, err)
	}
	s2, err := f.m.Open(ctx, s.ID())
	if err != nil {
		t.Fatalf("open a second connection: %v", err)
	}
	if out, _, _ := run(t, s2, "cat hello.txt"); out != "hello from the host\n" {
		t.Fatalf("second connection: %q", out)
	}
	s2.Close()

	// An orphan: the record is gone, gc removes the pod.
	os.Remove(filepath.Join(RecordDir(f.m.StateDir), s.ID()+".json"))
	removed, err := f.m.GC(ctx)
	if err != nil || len(removed) != 1 || removed[0].ID != s.ID() || !strings.Contains(removed[0].Reason, "orphaned") {
		t.Fatalf("GC of the orphan: %+v, %v", removed, err)
	}
	if _, err := f.m.Open(ctx, s.ID()); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Open after gc: %v, want ErrNoSession", err)
	}
}

// TestClusterReadOnly: a read-only session's workspace is a read-only
// mount (the upload happened before, in the init container).
func TestClusterReadOnly(t *testing.T) {
	f := newClusterFixture(t)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "a"), []byte("A"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := f.m.Create(ctx, f.spec("ro", ws, sandbox.ReadOnly), packDir(ws))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer f.m.Remove(context.Background(), s.ID())
	defer s.Close()
	if out, _, code := run(t, s, "cat a && echo x > a; echo y > new; cat a"); code == 0 && strings.Contains(out, "x") {
		t.Fatalf("wrote a read-only workspace: %q", out)
	}
	if out, _, code := run(t, s, "echo ok > /tmp/t && cat /tmp/t"); code != 0 || out != "ok\n" {
		t.Fatalf("/tmp not writable: %d %q", code, out)
	}
}

// TestClusterMissingImage: a worker image the cluster does not have fails
// the create at once, names the image and how to load it, and leaves no
// pod or record.
func TestClusterMissingImage(t *testing.T) {
	f := newClusterFixture(t)
	ws := t.TempDir()
	sp := f.spec("noimg", ws, sandbox.WorkspaceWrite)
	sp.WorkerImage = WorkerImageRepo + ":0000000000000000"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := f.m.Create(ctx, sp, packDir(ws))
	if !errors.Is(err, ErrPodFailed) || !strings.Contains(err.Error(), "vak session worker-image") {
		t.Fatalf("create with a missing worker image: %v", err)
	}
	pods, _ := f.env.Client.CoreV1().Pods(f.env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kubetest.Selector(t)})
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s left behind", p.Name)
		}
	}
	if recs, _ := filepath.Glob(filepath.Join(RecordDir(f.m.StateDir), "*.json")); len(recs) != 0 {
		t.Errorf("records left behind: %v", recs)
	}
}

// control runs cmd in an unfenced busybox pod and wants want in its
// output: what the fence stops is reachable without it.
func control(t *testing.T, env *kubetest.Env, cmd, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "control", Labels: kubetest.Labels(t)},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "c", Image: kubetest.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "sleep 600"}}}},
	}
	if _, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("control pod: %v", err)
	}
	if _, err := env.WaitPod(ctx, "control", kubetest.Running); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := env.Exec(ctx, "control", "c", []string{"sh", "-c", cmd})
	if !strings.Contains(out, want) {
		t.Fatalf("positive control %q in an unfenced pod: %q %q %v", cmd, out, errOut, err)
	}
}

// TestClusterWarmPool: a create claims a warm pool pod (its fence done,
// waiting for the workspace) instead of making one, and gets the same
// session: the workspace uploaded, commands run, rm removes the pod; gc
// leaves a warm pod alone. Cold and warm create times are logged.
func TestClusterWarmPool(t *testing.T) {
	f := newClusterFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "f.txt"), []byte("pooled\n"), 0o644)
	sp := f.spec("pool", ws, sandbox.WorkspaceWrite)

	start := time.Now()
	cold, err := f.m.Create(ctx, sp, packDir(ws))
	if err != nil {
		t.Fatal(err)
	}
	coldTime := time.Since(start)
	if out, _, code := run(t, cold, "cat f.txt"); code != 0 || out != "pooled\n" {
		t.Fatalf("cold session: %q %d", out, code)
	}
	cold.Close()
	if err := f.m.Remove(ctx, cold.ID()); err != nil {
		t.Fatal(err)
	}

	f.m.Pool = true
	if n, err := f.m.FillPool(ctx, sp, 1); err != nil || n != 1 {
		t.Fatalf("fill: %d, %v", n, err)
	}
	pods, err := f.env.Client.CoreV1().Pods(f.env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelKind + "=" + KindPool})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pool pods: %v %v", pods, err)
	}
	warmPod := pods.Items[0].Name
	if _, err := f.m.waitPod(ctx, warmPod, syncRunning); err != nil {
		t.Fatalf("the pool pod did not get warm: %v", err)
	}
	if removed, err := f.m.GC(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("gc removed %v (%v): a warm pod must stay", removed, err)
	}

	start = time.Now()
	warm, err := f.m.Create(ctx, sp, packDir(ws))
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Close()
	warmTime := time.Since(start)
	if warm.Pod() != f.env.Namespace+"/"+warmPod {
		t.Errorf("the create made %s instead of claiming %s", warm.Pod(), warmPod)
	}
	if out, _, code := run(t, warm, "cat f.txt; id -u"); code != 0 || out != "pooled\n1000\n" {
		t.Fatalf("warm session: %q %d", out, code)
	}
	t.Logf("create to the worker's ready: cold %v, warm (a claimed pool pod) %v", coldTime.Round(time.Millisecond), warmTime.Round(time.Millisecond))
	if err := f.m.Remove(ctx, warm.ID()); err != nil {
		t.Fatal(err)
	}
	// Deleted with grace 0: gone or going.
	if p, err := f.env.Client.CoreV1().Pods(f.env.Namespace).Get(ctx, warmPod, metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Error("rm left the claimed pod")
	}
}
