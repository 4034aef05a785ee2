package kubetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"vak/internal/testenv"
)

// APIServer starts an etcd and a kube-apiserver for t on free loopback
// ports (the binaries of scripts/k8s/build.sh, found through VAK_K8S_DIR),
// with certificates made for it, and stops both by PID at cleanup. Nothing
// else runs: objects are stored and served, pods are never scheduled.
func APIServer(t testing.TB) *Env {
	t.Helper()
	apiserver, etcd := Binary("kube-apiserver"), Etcd()
	for _, b := range []string{apiserver, etcd} {
		if _, err := os.Stat(b); err != nil {
			testenv.Missing(t, EnvRequireKubernetes, fmt.Sprintf("%s is missing (scripts/k8s/build.sh kube-apiserver builds it): %v", b, err))
		}
	}
	dir := t.TempDir()
	files, err := writePKI(dir)
	if err != nil {
		t.Fatalf("apiserver certificates: %v", err)
	}
	ports := freePorts(t, 3)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	etcdDone := startProcess(t, dir, "etcd", etcd, "--name=vaktest", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=vaktest="+peerURL)
	apiDone := startProcess(t, dir, "kube-apiserver", apiserver, "--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file="+files.ServerCert, "--tls-private-key-file="+files.ServerKey, "--client-ca-file="+files.CA,
		"--service-account-key-file="+files.SAPub, "--service-account-signing-key-file="+files.SAKey,
		"--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC", "--allow-privileged=true",
		// A loopback advertise address needs no endpoint reconciler.
		"--endpoint-reconciler-type=none",
		// No controller-manager makes the default service accounts.
		"--disable-admission-plugins=ServiceAccount")
	cfg := &rest.Config{
		Host: "https://127.0.0.1:" + strconv.Itoa(ports[2]),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: files.CA, CertFile: files.AdminCert, KeyFile: files.AdminKey,
		},
	}
	if err := waitReady(cfg, 2*time.Minute, etcdDone, apiDone); err != nil {
		t.Fatalf("kube-apiserver: %v\n%s", err, logTails(dir, "etcd", "kube-apiserver"))
	}
	return newEnv(t, cfg, false)
}

// waitReady polls the apiserver's /readyz until it answers ok, failing
// early when one of the processes (exited) ends.
func waitReady(cfg *rest.Config, limit time.Duration, exited ...<-chan struct{}) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		for i, ch := range exited {
			select {
			case <-ch:
				return fmt.Errorf("process %d of %d exited before the apiserver was ready", i+1, len(exited))
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w", limit, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startProcess starts bin with args, its output in dir/name.log, and stops
// it at cleanup: SIGTERM to its PID, SIGKILL after ten seconds. The channel
// is closed when the process has exited.
func startProcess(t testing.TB, dir, name, bin string, args ...string) <-chan struct{} {
	t.Helper()
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatalf("%s log: %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return done
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// logTails returns the last few KiB of each named process's log in dir.
func logTails(dir string, names ...string) string {
	var s string
	for _, n := range names {
		b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
		if len(b) > 4096 {
			b = b[len(b)-4096:]
		}
		s += fmt.Sprintf("--- %s.log (tail)\n%s\n", n, b)
	}
	return s
}
