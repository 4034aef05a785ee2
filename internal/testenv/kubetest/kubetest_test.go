//go:build kubernetes

// The harness's own tests need the Kubernetes binaries (APIServer) or the
// test cluster (Cluster): they are built with -tags kubernetes, which the
// Kubernetes leg passes (docs/kubernetes.md). .ci/run vets them; it does not
// run them yet.

package kubetest

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/client-go/util/exec"
)

// testPod is a busybox pod labelled as t's that sleeps until deleted.
func testPod(t *testing.T, name string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: Labels(t)},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"},
			}},
		},
	}
}

// TestAPIServerPodObjects: against an apiserver of the test's own, pod
// objects are created, listed by the test's labels and deleted.
func TestAPIServerPodObjects(t *testing.T) {
	start := time.Now()
	env := APIServer(t)
	t.Logf("etcd + kube-apiserver ready in %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods := env.Client.CoreV1().Pods(env.Namespace)
	names := []string{"one", "two"}
	for _, n := range names {
		if _, err := pods.Create(ctx, testPod(t, n), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", n, err)
		}
	}
	for _, tc := range []struct {
		name   string
		delete string
		want   int
	}{
		{name: "both created", want: 2},
		{name: "one deleted", delete: "one", want: 1},
		{name: "both deleted", delete: "two", want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.delete != "" {
				if err := pods.Delete(ctx, tc.delete, metav1.DeleteOptions{}); err != nil {
					t.Fatalf("delete pod %s: %v", tc.delete, err)
				}
			}
			list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: Selector(t)})
			if err != nil {
				t.Fatalf("list pods: %v", err)
			}
			if len(list.Items) != tc.want {
				t.Fatalf("listed %d pods, want %d", len(list.Items), tc.want)
			}
		})
	}
}

// TestClusterExec: on the test cluster a busybox pod reaches Running and
// exec through client-go returns the command's output and exit status.
func TestClusterExec(t *testing.T) {
	env := Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, testPod(t, "exec"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if _, err := env.WaitPod(ctx, "exec", Running); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod Running %v after create", time.Since(start))
	for _, tc := range []struct {
		name           string
		cmd            []string
		stdout, stderr string
		exit           int
	}{
		{name: "stdout", cmd: []string{"echo", "hello from the pod"}, stdout: "hello from the pod\n"},
		{name: "stderr", cmd: []string{"sh", "-c", "echo oops >&2"}, stderr: "oops\n"},
		{name: "exit status", cmd: []string{"sh", "-c", "exit 3"}, exit: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			stdout, stderr, err := env.Exec(ctx, "exec", "main", tc.cmd)
			t.Logf("exec round trip %v", time.Since(start))
			var code utilexec.CodeExitError
			switch {
			case tc.exit == 0 && err != nil:
				t.Fatalf("exec: %v (stderr %q)", err, stderr)
			case tc.exit != 0 && (!errors.As(err, &code) || code.ExitStatus() != tc.exit):
				t.Fatalf("exec error = %v, want exit status %d", err, tc.exit)
			}
			if stdout != tc.stdout || stderr != tc.stderr {
				t.Fatalf("stdout %q stderr %q, want %q and %q", stdout, stderr, tc.stdout, tc.stderr)
			}
		})
	}
}
