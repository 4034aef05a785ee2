//go:build kubernetes

package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"vak/internal/egress/egresstest"
	"vak/internal/kubesession"
	"vak/internal/testenv"
	"vak/internal/testenv/kubetest"
)

const kubeSecret = "vak-kube-real-secret-0123456789"

// nodeIP is the test cluster node's InternalIP: the host's address the
// gateway pod reaches the test's upstreams at.
func nodeIP(t *testing.T, env *kubetest.Env) string {
	t.Helper()
	nodes, err := env.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil {
				return a.Address
			}
		}
	}
	t.Fatal("the test cluster's node has no IPv4 InternalIP")
	return ""
}

// TestKubernetesProxiedSessionCLI drives a proxied kubernetes session on
// the real test cluster through vak's own commands: the namespace's
// gateway is deployed, and from inside the pod the egress matrix holds
// (an allowed host answers with the real secret swapped in upstream, the
// placeholder toward another allowed host is refused, a canary on the
// node is never reached by TCP, UDP, ICMP or IPv6, the metadata address
// gets 403, DNS for a denied name gives nothing), the workload cannot
// undo the fence, and with the gateway gone commands fail closed, then
// recover once it is back.
func TestKubernetesProxiedSessionCLI(t *testing.T) {
	env := kubetest.Cluster(t)
	vak := testenv.Vak(t)
	ref := kubetest.LoadArchive(t, func(w io.Writer) (string, error) { return kubesession.WriteWorkerImage(w, vak) })
	ip := nodeIP(t, env)
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("VAKTEST_KUBE_KEY", kubeSecret)

	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	var mu sync.Mutex
	seen := map[string][]string{}
	record := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name] = append(seen[name], r.Header.Get("X-Key"))
			mu.Unlock()
			fmt.Fprintf(w, "UPSTREAM-%s\n", name)
		})
	}
	api := egresstest.StartTLS(t, egresstest.Listen(t, ip, 0), ca, record("api"), "api.test")
	other := egresstest.StartTLS(t, egresstest.Listen(t, ip, 0), ca, record("other"), "other.test")
	// The canary shares the node's address with the allowed upstreams
	// (the rules allow only their ports): nothing may ever reach it.
	canary := egresstest.StartCanary(t, egresstest.Listen(t, ip, 0))
	udp, err := net.ListenPacket("udp4", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	udpCount := 0
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			mu.Lock()
			udpCount++
			mu.Unlock()
		}
	}()

	// Two gateway replicas (kubeReplicasLeg checks both serve).
	cfg := writeConfig(t, kubeConfig(env, ref)+`gateway_replicas = 2
[network]
policy = "proxied"
[[network.rules]]
name = "api"
hosts = ["api.test"]
cidrs = ["`+ip+`/32"]
ports = [`+strconv.Itoa(api.Port())+`]
[[network.rules]]
name = "other"
hosts = ["other.test"]
cidrs = ["`+ip+`/32"]
ports = [`+strconv.Itoa(other.Port())+`]
[network.dns.overrides]
"api.test" = ["`+ip+`"]
"other.test" = ["`+ip+`"]
"denied.test" = ["`+ip+`"]
[gateway]
extra_ca_bundles = [`+strconv.Quote(caFile)+`]
[secrets.KUBE_KEY]
env = "VAKTEST_KUBE_KEY"
hosts = ["api.test"]
`)
	ws := tempWorkspace(t)
	probe, err := os.ReadFile(testenv.Probe(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "probe"), probe, 0o755); err != nil {
		t.Fatal(err)
	}
	labels := []string{"--label", testenv.TestLabel + "=1", "--label", testenv.TestIDLabel + "=" + testenv.TestID(t)}
	start := time.Now()
	code, out, errs := vakMain(t, cfg, append([]string{"session", "create", "-w", ws, "--task", "proxied"}, labels...)...)
	t.Logf("create, the namespace's gateway deployed first: %v", time.Since(start).Round(time.Millisecond))
	if code != 0 {
		t.Fatalf("create: exit %d: %s %s", code, out, errs)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { vakMain(t, cfg, "session", "rm", id) })
	if !strings.Contains(errs, "waiting for the gateway") {
		t.Errorf("create's progress does not mention the gateway: %s", errs)
	}
	sh := func(script string) string {
		t.Helper()
		_, out, errs := vakMain(t, cfg, "session", "exec", id, "--", "sh", "-c", script)
		return out + errs
	}
	apiURL := "https://api.test:" + strconv.Itoa(api.Port()) + "/"
	otherURL := "https://other.test:" + strconv.Itoa(other.Port()) + "/"
	canaryAddr := net.JoinHostPort(ip, strconv.Itoa(canary.Port()))

	// The positive control: an allowed host, the placeholder swapped for
	// the real secret on the way out, never the real value inside.
	if got := sh(`echo "key=$KUBE_KEY"; ./probe http -H "X-Key: $KUBE_KEY" ` + apiURL + ` 15s`); !strings.Contains(got, "UPSTREAM-api") || !strings.Contains(got, "key=vakph_") || strings.Contains(got, kubeSecret) {
		t.Fatalf("allowed host through the gateway: %s", got)
	}
	mu.Lock()
	if len(seen["api"]) != 1 || seen["api"][0] != kubeSecret {
		t.Errorf("the allowed upstream saw X-Key %q, want the real secret", seen["api"])
	}
	mu.Unlock()

	for _, c := range []struct{ name, script, want, never string }{
		{"placeholder toward another allowed host", `./probe http -H "X-Key: $KUBE_KEY" ` + otherURL + ` 10s`, "403", "UPSTREAM-other"},
		{"metadata address", `./probe http http://169.254.169.254/ 10s`, "403", "OK 200"},
		{"UDP to the node", `./probe udp ` + net.JoinHostPort(ip, strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)) + ` 2s`, "FAIL", "OK"},
		{"ICMP to the node", `./probe ping ` + ip + ` 2s`, "FAIL", "OK"},
		{"IPv6", `./probe connect '[fd00::1]:443' 2s`, "FAIL", "OK"},
		{"DNS of a denied name", `./probe dns denied.test 1.1.1.1 5s`, "", ip},
		{"the workload undoes the fence", `/.vak/bin/vak netclient unfence; echo rc=$?`, "rc=", "unfenced"},
		{"TCP to the canary (raw, not HTTP)", `printf 'x' | ./probe connect ` + canaryAddr + ` 3s; ./probe http http://` + canaryAddr + `/ 5s`, "", "UPSTREAM"},
	} {
		got := sh(c.script)
		if (c.want != "" && !strings.Contains(got, c.want)) || strings.Contains(got, c.never) {
			t.Errorf("%s: want %q and never %q: %s", c.name, c.want, c.never, got)
		}
	}
	mu.Lock()
	if len(seen["other"]) != 0 {
		t.Errorf("the other upstream was reached: %q", seen["other"])
	}
	if udpCount != 0 {
		t.Errorf("%d UDP datagrams reached the node", udpCount)
	}
	mu.Unlock()
	if n := canary.Accepted.Load(); n != 0 {
		t.Errorf("the canary on the node accepted %d connections", n)
	}

	receiptsDir := kubeReceiptsLeg(t, cfg)

	// The gateway gone: commands fail closed (nothing reaches anything);
	// back, they work again.
	ctx := context.Background()
	scale := func(n int32) {
		t.Helper()
		s, err := env.Client.AppsV1().Deployments(env.Namespace).GetScale(ctx, kubesession.GatewayName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.Replicas = n
		if _, err := env.Client.AppsV1().Deployments(env.Namespace).UpdateScale(ctx, kubesession.GatewayName, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scale(0)
	waitFor(t, "the gateway pod to go", func() bool {
		pods, err := env.Client.CoreV1().Pods(env.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kubesession.LabelKind + "=" + kubesession.KindGateway})
		return err == nil && len(pods.Items) == 0
	})
	if got := sh(`./probe http -H "X-Key: $KUBE_KEY" ` + apiURL + ` 5s; printf 'x' | ./probe connect ` + canaryAddr + ` 3s`); strings.Contains(got, "UPSTREAM-api") {
		t.Errorf("with the gateway gone, the allowed host was still reached: %s", got)
	}
	mu.Lock()
	if len(seen["api"]) != 1 {
		t.Errorf("with the gateway gone, the upstream saw %d requests", len(seen["api"]))
	}
	mu.Unlock()
	scale(2)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := sh(`./probe http -H "X-Key: $KUBE_KEY" ` + apiURL + ` 5s`)
		if strings.Contains(got, "UPSTREAM-api") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session did not recover after the gateway came back: %s", got)
		}
		time.Sleep(time.Second)
	}
	if n := canary.Accepted.Load(); n != 0 {
		t.Errorf("the canary on the node accepted %d connections", n)
	}
	// The copies of the first gateway pods (one of them edited above) go:
	// those pods are gone, and the replicas leg verifies the new ones'.
	os.RemoveAll(receiptsDir)
	kubeReplicasLeg(t, cfg, env, sh, apiURL)
	// What a request through the cluster gateway costs (logged, not
	// asserted: docs/kubernetes.md records it).
	for _, conc := range []string{"1", "8"} {
		t.Logf("bench, concurrency %s: %s", conc, strings.TrimSpace(sh(`./probe bench `+apiURL+` 300 `+conc)))
	}
	kubeSnapshotLeg(t, cfg, labels, ws, id, sh, apiURL)
}

// kubeReceiptsLeg: `vak receipts fetch` copies the gateway pod's receipts
// to the host, where they verify with the key the host kept and hold the
// decisions just made (the allowed host, the refused placeholder); the
// copy edited on the host no longer verifies.
func kubeReceiptsLeg(t *testing.T, cfg string) string {
	code, out, errs := vakMain(t, cfg, "receipts", "fetch")
	if code != 0 || !strings.Contains(out, " OK") || strings.Contains(out, "NO:") {
		t.Fatalf("receipts fetch: exit %d: %s %s", code, out, errs)
	}
	t.Logf("receipts fetch:\n%s%s", errs, out)
	_, dir, ok := strings.Cut(strings.TrimSpace(errs), " into ")
	if !ok {
		t.Fatalf("receipts fetch does not say where: %s", errs)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*.jsonl"))
	if len(logs) == 0 {
		logs, _ = filepath.Glob(filepath.Join(dir, "*", "*.jsonl"))
	}
	all := ""
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		all += string(b)
	}
	if !strings.Contains(all, "api.test") || !strings.Contains(all, "other.test") || strings.Contains(all, kubeSecret) {
		t.Errorf("the fetched receipts (%d logs) lack the decisions or hold the secret:\n%s", len(logs), all)
	}
	if len(logs) == 0 {
		return dir
	}
	// Edit a log that records the allowed host: with more than one
	// gateway pod, the first log need not hold it.
	edited := ""
	for _, l := range logs {
		if b, _ := os.ReadFile(l); strings.Contains(string(b), "api.test") {
			os.WriteFile(l, []byte(strings.Replace(string(b), "api.test", "apx.test", 1)), 0o600)
			edited = l
			break
		}
	}
	if edited == "" {
		t.Fatalf("no fetched log records api.test (%d logs)", len(logs))
	}
	key := filepath.Join(filepath.Dir(dir), "receipts-key", "receipts.pub")
	if code, out, _ := vakMain(t, cfg, "receipts", "ls", "--key", key, dir); code != 1 || !strings.Contains(out, "NO:") {
		t.Errorf("an edited copy: exit %d, want 1 and NO: %s", code, out)
	}
	return dir
}

// kubeReplicasLeg: with kubernetes.gateway_replicas = 2 the namespace's
// gateway runs two pods behind its Service, and both serve the session
// with the same placeholders and CA: of 24 requests on new connections,
// each pod's receipts (vak receipts fetch) record some, and every one
// reached the upstream with the real secret.
func kubeReplicasLeg(t *testing.T, cfg string, env *kubetest.Env, sh func(string) string, apiURL string) {
	ctx := context.Background()
	dep, err := env.Client.AppsV1().Deployments(env.Namespace).Get(ctx, kubesession.GatewayName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Fatalf("gateway_replicas = 2 gave a Deployment of %v replicas", dep.Spec.Replicas)
	}
	waitFor(t, "two gateway pods ready", func() bool {
		d, err := env.Client.AppsV1().Deployments(env.Namespace).Get(ctx, kubesession.GatewayName, metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 2 && d.Status.Replicas == 2
	})
	const n = 24
	got := sh(`i=0; while [ $i -lt ` + strconv.Itoa(n) + ` ]; do ./probe http -H "X-Key: $KUBE_KEY" ` + apiURL + `replica 10s; i=$((i+1)); done`)
	if c := strings.Count(got, "UPSTREAM-api"); c != n {
		t.Fatalf("%d of %d requests through two gateway replicas answered: %s", c, n, got)
	}
	code, out, errs := vakMain(t, cfg, "receipts", "fetch")
	if code != 0 {
		t.Fatalf("receipts fetch: exit %d: %s %s", code, out, errs)
	}
	_, dir, _ := strings.Cut(strings.TrimSpace(errs), " into ")
	perPod := map[string]int{}
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*.jsonl"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "*.jsonl"))
	for _, l := range append(logs, more...) {
		b, _ := os.ReadFile(l)
		rel, _ := filepath.Rel(dir, l)
		pod, _, _ := strings.Cut(rel, string(filepath.Separator))
		perPod[pod] += strings.Count(string(b), `"path":"/replica"`)
	}
	total, serving := 0, 0
	for _, c := range perPod {
		total += c
		if c > 0 {
			serving++
		}
	}
	t.Logf("requests per gateway pod: %v", perPod)
	if total != n || serving != 2 {
		t.Errorf("the receipts of the gateway pods record %v requests (want %d over both pods)", perPod, n)
	}
}

// kubeSnapshotLeg: a package installed into the session's home through
// the gateway is snapshotted (the key is the Docker sessions' kind: the
// same home and manifest give the same key, reused; a changed home under
// it is refused), a session created from the key has it on top of the
// host's workspace, and neither the snapshot on the host nor the new
// session holds the real secret.
func kubeSnapshotLeg(t *testing.T, cfg string, labels []string, ws, id string, sh func(string) string, apiURL string) {
	install := `mkdir -p ~/.local/bin && ./probe http -H "X-Key: $KUBE_KEY" ` + apiURL + `pkg 15s > ~/.local/pkg && printf '#!/bin/sh\necho tool-ran\n' > ~/.local/bin/tool && chmod 755 ~/.local/bin/tool && grep -c UPSTREAM-api ~/.local/pkg`
	if got := sh(install); !strings.HasPrefix(got, "1\n") {
		t.Fatalf("install through the gateway: %s", got)
	}
	snap := func(args ...string) (int, string, string) {
		return vakMain(t, cfg, append([]string{"session", "snapshot"}, append(args, id)...)...)
	}
	code, out, errs := snap("-m", "step=install")
	if code != 0 || !strings.Contains(out, "home:  ") {
		t.Fatalf("snapshot: exit %d: %s %s", code, out, errs)
	}
	t.Logf("snapshot:\n%s", out)
	key := strings.TrimSpace(strings.TrimPrefix(strings.Split(out, "\n")[0], "key:"))
	dir := strings.Fields(strings.TrimPrefix(strings.Split(out, "\n")[1], "home:"))[0]
	tarData, err := os.ReadFile(filepath.Join(dir, "home.tar"))
	if err != nil || !strings.Contains(string(tarData), "UPSTREAM-api") || strings.Contains(string(tarData), kubeSecret) {
		t.Errorf("the stored home (%d bytes, %v): want the package and never the real secret", len(tarData), err)
	}
	if code, out, errs := snap("-q", "-m", "step=install"); code != 0 || strings.TrimSpace(out) != key {
		t.Errorf("the same snapshot again: exit %d, key %q want %q: %s", code, out, key, errs)
	}
	if code, out, _ := snap("-q", "-m", "step=other"); code != 0 || strings.TrimSpace(out) == key {
		t.Errorf("another manifest: exit %d, key %q (want a new one)", code, out)
	}
	sh(`echo changed >> ~/.local/pkg`)
	if code, _, errs := snap("-m", "step=install"); code != ExitUsage || !strings.Contains(errs, "its home differs") {
		t.Errorf("a changed home under the same key: exit %d, want %d: %s", code, ExitUsage, errs)
	}

	code, out, errs = vakMain(t, cfg, append([]string{"session", "create", "-w", ws, "--from", key, "--task", "restored"}, labels...)...)
	if code != 0 {
		t.Fatalf("create --from: exit %d: %s %s", code, out, errs)
	}
	rid := strings.TrimSpace(out)
	t.Cleanup(func() { vakMain(t, cfg, "session", "rm", rid) })
	// The namespace's gateway was deployed by the first create: a second
	// with the same config uses it as it runs, never rolls it under the
	// first session.
	if strings.Contains(errs, "updated ") {
		t.Errorf("the second proxied create changed the gateway: %s", errs)
	}
	code, out, errs = vakMain(t, cfg, "session", "exec", rid, "--", "sh", "-c", `~/.local/bin/tool; cat ~/.local/pkg; test -x probe && echo workspace-ok; grep -rl "`+kubeSecret+`" ~ . 2>/dev/null; env | grep -c "`+kubeSecret+`" || true`)
	if code != 0 || !strings.Contains(out, "tool-ran") || !strings.Contains(out, "UPSTREAM-api") || strings.Contains(out, "changed") ||
		!strings.Contains(out, "workspace-ok") || !strings.HasSuffix(out, "0\n") {
		t.Errorf("the session from the snapshot: exit %d: %q %s", code, out, errs)
	}
	if code, _, errs := vakMain(t, cfg, "session", "rm", rid); code != 0 {
		t.Errorf("rm of the session from the snapshot: exit %d: %s", code, errs)
	}

	// A snapshot whose image the cluster no longer runs as recorded (the
	// tag moved): the create fails closed, and leaves no session.
	moved := strings.Repeat("0", 64)
	mdir := filepath.Join(filepath.Dir(dir), moved)
	if err := os.MkdirAll(mdir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(mdir, "home.tar"), tarData, 0o600)
	meta, _ := os.ReadFile(filepath.Join(dir, "snapshot.json"))
	meta = []byte(strings.Replace(strings.Replace(string(meta), key, moved, 1), `"image_id": "sha256:`, `"image_id": "sha256:0`, 1))
	os.WriteFile(filepath.Join(mdir, "snapshot.json"), meta, 0o600)
	code, out, errs = vakMain(t, cfg, append([]string{"session", "create", "-w", ws, "--from", moved, "--task", "moved"}, labels...)...)
	if code != ExitUsage || !strings.Contains(errs, "the cluster ran it as") {
		t.Errorf("create from a snapshot of a moved image: exit %d, want %d: %s %s", code, ExitUsage, out, errs)
	}
	if _, out, _ := vakMain(t, cfg, append([]string{"session", "ls", "-q"}, labels...)...); strings.Contains(out, "moved") {
		t.Errorf("the refused create left a session: %s", out)
	}
}
