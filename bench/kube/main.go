// Command kube measures kubernetes sessions on a cluster (vak's test
// cluster: scripts/k8s/up.sh), side by side with the floor of the design,
// interleaved in one run so drift hits every contender:
//
//   - create to first exec: a cold session (a new pod: fence, install,
//     workspace upload, worker), a warm one (a claimed pool pod), and the
//     floor: a plain pod of the same image created and Running, which any
//     pod-per-session design pays;
//
//   - one command (`true`): on a session's open relay stream, a new `vak
//     session exec`-style stream per command (Manager.Open + Exec), and the
//     floor: an exec of `true` through the exec subresource into a plain
//     pod, what `kubectl exec` pays;
//
//   - with -capacity N: sessions created one after another (each with its
//     limits, requests a quarter of them) until the first failure or N,
//     and how long the last create took.
//
//     go run ./bench/kube -kubeconfig ~/.cache/vak-k8s/cluster/kubeconfig -n 20 -n-create 5
//
// It needs the worker image of the vak it builds on the cluster: as root
// on the test cluster it loads it itself (scripts/k8s/load-image.sh).
// Everything it creates is in a namespace of its own, deleted at the end.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"vak/bench/internal/stats"
	"vak/internal/kubesession"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
	"vak/internal/wsync"
)

const image = "vak-k8s.local/busybox:1"

var labels = map[string]string{"vak.bench": "kube"}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("VAK_TEST_KUBECONFIG"), "kubeconfig of the cluster")
	n := flag.Int("n", 20, "command samples per contender")
	nCreate := flag.Int("n-create", 5, "create samples per contender")
	capacity := flag.Int("capacity", 0, "create sessions until the first failure or this many (0: skip)")
	flag.Parse()
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	must(err)
	client, err := kubernetes.NewForConfig(cfg)
	must(err)
	ns := fmt.Sprintf("vakbench-%d", time.Now().Unix())
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	must(err)
	defer client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})

	ref := workerImage()
	state, _ := os.MkdirTemp("", "vak-bench-state-")
	defer os.RemoveAll(state)
	cl, err := kubesession.NewCluster(cfg, ns)
	must(err)
	m := &kubesession.Manager{Cluster: cl, StateDir: state, Labels: labels}
	ws, _ := os.MkdirTemp("", "vak-bench-ws-")
	defer os.RemoveAll(ws)
	os.WriteFile(filepath.Join(ws, "f.txt"), []byte("bench\n"), 0o644)
	pack := func(w io.Writer) error { _, err := wsync.Pack(w, ws, wsync.PackOptions{}); return err }
	spec := func(task string) kubesession.Spec {
		return kubesession.Spec{Task: task, Workspace: ws, Image: image, WorkerImage: ref, PullPolicy: corev1.PullNever,
			Mode: sandbox.WorkspaceWrite, Limits: sandbox.Limits{Memory: 256 << 20, CPUs: 1}, Lifetime: time.Hour}
	}

	fmt.Printf("## create to first exec (n=%d each, interleaved)\n\n", *nCreate)
	floor, cold, warm := &stats.Sample{Name: "floor: plain pod Running"}, &stats.Sample{Name: "session, cold"}, &stats.Sample{Name: "session, warm (pool)"}
	for i := range *nCreate {
		d, err := stats.Time(func() error { return plainPod(ctx, client, ns, fmt.Sprintf("floor-%d", i), true) })
		must(err)
		floor.Add(d)
		m.Pool = false
		cold.Add(createExec(ctx, m, spec(fmt.Sprintf("cold%d", i)), pack))
		m.Pool = true
		_, err = m.FillPool(ctx, spec("pool"), 1)
		must(err)
		waitWarm(ctx, client, ns)
		warm.Add(createExec(ctx, m, spec(fmt.Sprintf("warm%d", i)), pack))
	}
	fmt.Println(stats.Table(floor, cold, warm))

	fmt.Printf("## one command, `true` (n=%d each, interleaved)\n\n", *n)
	must(plainPod(ctx, client, ns, "exec-floor", false))
	m.Pool = false
	s, err := m.Create(ctx, spec("rtt"), pack)
	must(err)
	efloor, open, fresh := &stats.Sample{Name: "floor: exec subresource into a plain pod"}, &stats.Sample{Name: "session, open relay stream"}, &stats.Sample{Name: "session, new stream (Open + Exec)"}
	for range *n {
		d, err := stats.Time(func() error { return execTrue(ctx, cfg, client, ns, "exec-floor") })
		must(err)
		efloor.Add(d)
		d, err = stats.Time(func() error { return execOn(ctx, s) })
		must(err)
		open.Add(d)
		d, err = stats.Time(func() error {
			s2, err := m.Open(ctx, s.ID())
			if err != nil {
				return err
			}
			defer s2.Close()
			return execOn(ctx, s2)
		})
		must(err)
		fresh.Add(d)
	}
	s.Close()
	fmt.Println(stats.Table(efloor, open, fresh))

	if *capacity > 0 {
		fmt.Printf("## sessions on the cluster, one after another (at most %d)\n\n", *capacity)
		// A pod the scheduler cannot place waits for capacity (an
		// autoscaler may add it): a minute is the bench's patience.
		m.StartTimeout = time.Minute
		var last time.Duration
		made := 0
		for i := range *capacity {
			start := time.Now()
			s, err := m.Create(ctx, spec(fmt.Sprintf("cap%d", i)), pack)
			if err != nil {
				fmt.Printf("create %d failed after %v: %v\n\n", i+1, time.Since(start).Round(time.Millisecond), err)
				break
			}
			last = time.Since(start)
			s.Close()
			made++
		}
		fmt.Printf("%d sessions running; the last create took %v\n", made, last.Round(time.Millisecond))
	}
}

// createExec times a create and its first command, then removes the session.
func createExec(ctx context.Context, m *kubesession.Manager, sp kubesession.Spec, pack kubesession.Pack) time.Duration {
	start := time.Now()
	s, err := m.Create(ctx, sp, pack)
	must(err)
	must(execOn(ctx, s))
	d := time.Since(start)
	s.Close()
	must(m.Remove(ctx, s.ID()))
	return d
}

func execOn(ctx context.Context, s *kubesession.Session) error {
	res, err := s.Exec(ctx, wire.BashArgs{Command: "true", TimeoutMS: 30000}, nil)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d", res.ExitCode)
	}
	return err
}

// plainPod creates a busybox pod and waits until it runs; with remove it
// deletes it again.
func plainPod(ctx context.Context, c kubernetes.Interface, ns, name string, remove bool) error {
	no, grace := false, int64(0)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.PodSpec{
		AutomountServiceAccountToken: &no, TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}},
	}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return err
	}
	for {
		got, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.Phase == corev1.PodRunning {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if remove {
		return c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	return nil
}

// waitWarm waits until the namespace's pool pod waits for its workspace.
func waitWarm(ctx context.Context, c kubernetes.Interface, ns string) {
	for {
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubesession.LabelKind + "=" + kubesession.KindPool})
		must(err)
		for _, p := range pods.Items {
			for _, st := range p.Status.InitContainerStatuses {
				if st.Name == kubesession.ContainerSync && st.State.Running != nil {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// execTrue runs `true` in pod through the exec subresource.
func execTrue(ctx context.Context, cfg *rest.Config, c kubernetes.Interface, ns, pod string) error {
	req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "c", Command: []string{"true"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	var out bytes.Buffer
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
}

// workerImage builds vak, writes its worker image and loads it into the
// test cluster's containerd.
func workerImage() string {
	vak, err := stats.BuildVak()
	must(err)
	defer os.RemoveAll(filepath.Dir(vak))
	archive := filepath.Join(filepath.Dir(vak), "worker.tar")
	f, err := os.Create(archive)
	must(err)
	ref, err := kubesession.WriteWorkerImage(f, vak)
	must(err)
	must(f.Close())
	if out, err := exec.Command("scripts/k8s/load-image.sh", "--archive", archive).CombinedOutput(); err != nil {
		log.Fatalf("load the worker image (run from the repository, as root): %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ref
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
