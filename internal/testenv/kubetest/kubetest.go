// Package kubetest gives tests a Kubernetes API to talk to through client-go.
//
// Cluster is the real single-node test cluster that scripts/k8s/up.sh brings
// up (its kubeconfig in VAK_TEST_KUBECONFIG): pods run there. APIServer
// starts an etcd and a kube-apiserver from the test itself, from the
// binaries scripts/k8s/build.sh left in VAK_K8S_DIR, for tests of API
// objects only (nothing schedules or runs a pod). Both hand the test a
// namespace of its own, labelled with vak's test label and the test's run
// id and deleted at cleanup. Without the cluster or the binaries a test
// skips, or fails when VAK_REQUIRE_KUBERNETES=1.
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"vak/internal/testenv"
)

// Environment variables of these tests.
const (
	// EnvKubeconfig names the kubeconfig of the test cluster (Cluster).
	EnvKubeconfig = "VAK_TEST_KUBECONFIG"
	// EnvRequireKubernetes=1 turns a missing cluster or missing binaries
	// into a failure.
	EnvRequireKubernetes = "VAK_REQUIRE_KUBERNETES"
	// EnvDir is the cache of scripts/k8s/build.sh (default
	// $HOME/.cache/vak-k8s).
	EnvDir = "VAK_K8S_DIR"
	// EnvVersion is the Kubernetes version built there (default Version).
	EnvVersion = "VAK_K8S_VERSION"
)

// Version is the Kubernetes version scripts/k8s/build.sh builds by default.
const Version = "v1.37.2"

// BusyboxImage is the busybox image scripts/k8s/up.sh imports into the
// test cluster; pods run it with imagePullPolicy: Never.
const BusyboxImage = "vak-k8s.local/busybox:1"

// Env is a Kubernetes API and a namespace of the test's own.
type Env struct {
	Config    *rest.Config
	Client    kubernetes.Interface
	Namespace string
}

// Labels are the labels of every object t creates: vak's test label and
// t's run id (testenv.TestID).
func Labels(t testing.TB) map[string]string {
	return map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: testenv.TestID(t)}
}

// Selector selects the objects t labelled (Labels).
func Selector(t testing.TB) string { return labels.SelectorFromSet(Labels(t)).String() }

// Cluster returns the test cluster of VAK_TEST_KUBECONFIG with a fresh
// namespace for t, deleted (and waited for) at cleanup.
func Cluster(t testing.TB) *Env {
	t.Helper()
	path := os.Getenv(EnvKubeconfig)
	if path == "" {
		testenv.Missing(t, EnvRequireKubernetes, EnvKubeconfig+" is unset (scripts/k8s/up.sh brings up the test cluster and prints it)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("%s=%s: %v", EnvKubeconfig, path, err)
	}
	return newEnv(t, cfg, true)
}

// newEnv makes the client and t's namespace; wait makes cleanup wait until
// the namespace is gone (a cluster runs the namespace controller, a bare
// apiserver does not).
func newEnv(t testing.TB, cfg *rest.Config, wait bool) *Env {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubernetes client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vaktest-" + randomHex(4), Labels: Labels(t)}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns.Name, err)
	}
	t.Cleanup(func() { deleteNamespace(t, client, ns.Name, wait) })
	return &Env{Config: cfg, Client: client, Namespace: ns.Name}
}

// deleteNamespace deletes t's namespace (and with it everything in it);
// with wait it waits up to two minutes for it to be gone.
func deleteNamespace(t testing.TB, client kubernetes.Interface, name string, wait bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", name, err)
		return
	}
	for wait {
		_, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("namespace %s still there after cleanup: %v", name, ctx.Err())
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Dir is the cache directory of scripts/k8s/build.sh.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "vak-k8s")
	}
	return filepath.Join(home, ".cache", "vak-k8s")
}

// Binary is the path of a Kubernetes binary build.sh built (kube-apiserver,
// kubelet, ...).
func Binary(name string) string {
	v := os.Getenv(EnvVersion)
	if v == "" {
		v = Version
	}
	return filepath.Join(Dir(), v, "bin", name)
}

// Etcd is the path of the etcd build.sh unpacked from Debian's package.
func Etcd() string { return filepath.Join(Dir(), "debian", "root", "usr", "bin", "etcd") }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// WaitPod polls pod name in e's namespace until ok accepts it or ctx ends.
func (e *Env) WaitPod(ctx context.Context, name string, ok func(*corev1.Pod) bool) (*corev1.Pod, error) {
	for {
		pod, err := e.Client.CoreV1().Pods(e.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && ok(pod) {
			return pod, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("phase %s", pod.Status.Phase)
			}
			return nil, fmt.Errorf("wait for pod %s/%s: %w (last: %w)", e.Namespace, name, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Running accepts a pod in phase Running (for WaitPod).
func Running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

// EnvWorkerImage names a worker image already loaded into the test
// cluster (scripts/test-nonroot loads it as root for the unprivileged
// leg, which cannot reach the cluster's containerd); LoadArchive then
// loads nothing.
const EnvWorkerImage = "VAK_TEST_WORKER_IMAGE"

var (
	loadMu     sync.Mutex
	loadedRefs = map[string]bool{}
)

// LoadArchive loads the image archive that write writes (a `docker save`
// archive; vak session worker-image's) into the test cluster's containerd
// with scripts/k8s/load-image.sh (root), once per ref and test process,
// and returns write's ref. With $VAK_TEST_WORKER_IMAGE set it returns that
// instead and loads nothing.
func LoadArchive(t testing.TB, write func(io.Writer) (string, error)) string {
	t.Helper()
	if ref := os.Getenv(EnvWorkerImage); ref != "" {
		return ref
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	f, err := os.CreateTemp("", "vak-image-*.tar")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	ref, err := write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("write the image archive: %v", err)
	}
	if loadedRefs[ref] {
		return ref
	}
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(t), "scripts", "k8s", "load-image.sh"), "--archive", f.Name()).CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/k8s/load-image.sh --archive: %v: %s", err, out)
	}
	loadedRefs[ref] = true
	return ref
}

// Kubeconfig writes a kubeconfig for e (context "vaktest", e's namespace)
// into t's temporary directory and returns its path: for code under test
// that loads one, as vak does.
func (e *Env) Kubeconfig(t testing.TB) string {
	t.Helper()
	c := e.Config.TLSClientConfig
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["vaktest"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthority: c.CAFile, CertificateAuthorityData: c.CAData}
	cfg.AuthInfos["vaktest"] = &clientcmdapi.AuthInfo{ClientCertificate: c.CertFile, ClientCertificateData: c.CertData, ClientKey: c.KeyFile, ClientKeyData: c.KeyData, Token: e.Config.BearerToken}
	cfg.Contexts["vaktest"] = &clientcmdapi.Context{Cluster: "vaktest", AuthInfo: "vaktest", Namespace: e.Namespace}
	cfg.CurrentContext = "vaktest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}
