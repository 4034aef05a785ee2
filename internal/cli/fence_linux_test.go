package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/egress/egresstest"
	"vak/internal/egress/ondemand"
	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

// nativeNet is a hermetic world for native proxied runs: TLS upstreams on
// host loopback addresses the gateway reaches by its rules' cidrs and DNS
// overrides, canaries a sandbox must never reach, a secret bound to one
// host, and a fresh state dir (so a fresh on-demand gateway, stopped at
// the end).
type nativeNet struct {
	cfg, ws, probe, state string
	api, other            *egresstest.Server
	// seen records the X-Key header each upstream received.
	mu   sync.Mutex
	seen map[string][]string
	// loCanary listens on the host's 127.0.0.1, ipCanary on an address no
	// rule lists; udp on both.
	loCanary, ipCanary *egresstest.Canary
	udp                []net.PacketConn
	udpHits            *countPackets
}

const nativeSecret = "vak-native-real-secret-0123456789"

type countPackets struct {
	mu sync.Mutex
	n  int
}

func (c *countPackets) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *countPackets) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func newNativeNet(t *testing.T) *nativeNet {
	t.Helper()
	testenv.RequireLandlock(t)
	n := &nativeNet{seen: map[string][]string{}, udpHits: &countPackets{}}
	n.state = t.TempDir()
	t.Setenv("XDG_STATE_HOME", n.state)
	t.Setenv("VAKTEST_NATIVE_KEY", nativeSecret)
	t.Cleanup(func() { stopOnDemand(t) })
	ca := egresstest.NewCA(t)
	dir := t.TempDir()
	caFile := ca.WritePEM(t, dir)
	record := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.mu.Lock()
			n.seen[name] = append(n.seen[name], r.Header.Get("X-Key"))
			n.mu.Unlock()
			fmt.Fprintf(w, "UPSTREAM-%s\n", name)
		})
	}
	n.api = egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.2", 0), ca, record("api"), "api.test")
	n.other = egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.3", 0), ca, record("other"), "other.test")
	n.loCanary = egresstest.StartCanary(t, egresstest.Listen(t, "127.0.0.1", 0))
	n.ipCanary = egresstest.StartCanary(t, egresstest.Listen(t, "127.0.0.4", 0))
	for _, ip := range []string{"127.0.0.1", "127.0.0.4"} {
		pc, err := net.ListenPacket("udp4", ip+":0")
		if err != nil {
			t.Fatal(err)
		}
		n.udp = append(n.udp, pc)
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				n.udpHits.add()
			}
		}()
	}
	n.cfg = writeConfig(t, fmt.Sprintf(`version = 1
[network]
policy = "proxied"
[[network.rules]]
name = "api"
hosts = ["api.test"]
cidrs = ["127.0.0.2/32"]
[[network.rules]]
name = "other"
hosts = ["other.test"]
cidrs = ["127.0.0.3/32"]
[network.dns.overrides]
"api.test" = ["127.0.0.2"]
"other.test" = ["127.0.0.3"]
"canary.test" = ["127.0.0.4"]
[gateway]
extra_ca_bundles = [%q]
[secrets.NATIVE_KEY]
env = "VAKTEST_NATIVE_KEY"
hosts = ["api.test"]
`, caFile))
	n.ws = tempWorkspace(t)
	n.probe = filepath.Join(n.ws, "probe")
	data, err := os.ReadFile(testenv.Probe(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.probe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// run runs script in a native proxied sandbox.
func (n *nativeNet) run(t *testing.T, script string) (int, string, string) {
	t.Helper()
	return vakMain(t, n.cfg, "run", "-w", n.ws, "--backend", "landlock", "--network", "proxied", "--", "sh", "-c", script)
}

func (n *nativeNet) url(s *egresstest.Server, host string) string {
	return "https://" + host + ":" + strconv.Itoa(s.Port()) + "/"
}

// TestNativeProxiedEgress: `vak run --network proxied` on the landlock
// backend reaches allowed HTTPS hosts through the user's on-demand gateway,
// with the gateway CA trusted automatically (curl and a Go client), and
// nothing else: denied hosts, raw TCP to an address, UDP, the host's
// loopback services, IPv6 and ICMP all fail, DNS to any resolver is
// answered by the gateway, and the command cannot change the fence.
// Every negative has a positive control from the host.
func TestNativeProxiedEgress(t *testing.T) {
	n := newNativeNet(t)
	// Positive controls: from the host, the canaries are reachable, so a
	// zero count below means the sandbox's attempt never arrived.
	for _, c := range []*egresstest.Canary{n.loCanary, n.ipCanary} {
		conn, err := net.Dial("tcp", c.L.Addr().String())
		if err != nil {
			t.Fatalf("control: dial canary %s: %v", c.L.Addr(), err)
		}
		conn.Close()
		waitFor(t, "control connection at "+c.L.Addr().String(), func() bool { return c.Accepted.Load() == 1 })
	}
	for _, pc := range n.udp {
		c, err := net.Dial("udp4", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("control"))
		c.Close()
	}
	waitFor(t, "control datagrams at the UDP canaries", func() bool { return n.udpHits.get() == len(n.udp) })
	udpBase := n.udpHits.get()

	api := n.url(n.api, "api.test")
	lo, ip := n.loCanary.Port(), n.ipCanary.Port()
	udpLo, udpIP := n.udp[0].LocalAddr().String(), n.udp[1].LocalAddr().String()
	for _, tc := range []struct {
		name, script string
		want         []string // every one in stdout
		deny         []string // none in stdout
	}{
		{"allowed https, curl, CA from the environment",
			"curl -sS --max-time 10 " + api + " && echo CURL-OK", []string{"UPSTREAM-api", "CURL-OK"}, nil},
		{"allowed https, Go client",
			"./probe tls " + api + " 10s", []string{"OK"}, []string{"FAIL"}},
		{"trust files readable in the view",
			`test -r "$SSL_CERT_FILE" && test -r "$NODE_EXTRA_CA_CERTS" && echo TRUST-OK`, []string{"TRUST-OK"}, nil},
		{"denied host (resolves to the sinkhole, refused by name)",
			"curl -sS --max-time 10 https://denied.test:" + strconv.Itoa(n.api.Port()) + "/", []string{"403 Forbidden", "denied.test"}, []string{"UPSTREAM"}},
		{"an address no rule lists, raw TCP",
			"./probe connect 127.0.0.4:" + strconv.Itoa(ip) + " 3s; printf 'x' | ./probe connect 127.0.0.4:" + strconv.Itoa(ip) + " 3s", nil, nil},
		{"the host's loopback service",
			"./probe connect 127.0.0.1:" + strconv.Itoa(lo) + " 3s", []string{"FAIL"}, nil},
		{"UDP to the host and to an address",
			"./probe udp " + udpLo + " 2s; ./probe udp " + udpIP + " 2s; ./probe quic " + udpIP + " 2s", nil, []string{"OK"}},
		{"IPv6",
			"./probe connect '[::1]:" + strconv.Itoa(lo) + "' 2s; ./probe connect '[2001:db8::1]:443' 2s", []string{"FAIL"}, []string{"OK"}},
		{"ICMP",
			"./probe ping 127.0.0.4 2s", nil, []string{"OK"}},
		{"DNS to any resolver is the gateway's (its override answers)",
			"./probe dns api.test 1.1.1.1 5s; ./probe dns --tcp api.test 9.9.9.9 5s; ./probe dns api.test 127.0.0.4 5s",
			[]string{"OK NOERROR A 127.0.0.2"}, []string{"FAIL"}},
		{"DNS for a denied name gets the sinkhole",
			"./probe dns denied.test 1.1.1.1 5s", []string{"198.18.0.1"}, nil},
		{"DNS to another port is plain UDP: dropped",
			"./probe dns api.test " + udpIP + " 2s", []string{"FAIL"}, nil},
		{"the gateway's sockets are out of reach (stage 1's descriptors, the host paths)",
			"for s in /proc/1/fd/4 /proc/1/fd/5 " + filepath.Join(n.state, "vak", ondemand.DirName, "data.sock") + " " + filepath.Join(n.state, "vak", ondemand.DirName, "admin.sock") + "; do ./probe unix $s; done",
			[]string{"FAIL"}, []string{"OK"}},
		{"the command cannot change the fence",
			"nft flush ruleset; echo nft=$?; ip link add vak-x type veth peer name vak-y; echo ip=$?; unshare -rn true; echo unshare=$?; ./probe attempt unshare-net; ./probe attempt socket-raw; curl -sS --max-time 10 " + api + "; curl -sS --max-time 5 https://denied.test:" + strconv.Itoa(n.api.Port()) + "/; ./probe connect 127.0.0.4:" + strconv.Itoa(ip) + " 3s",
			[]string{"UPSTREAM-api"}, []string{"nft=0", "ip=0", "unshare=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := n.run(t, tc.script)
			if code == ExitUnavailable {
				t.Fatalf("vak run: exit 69: %s", errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", w, out, errs)
				}
			}
			for _, d := range tc.deny {
				if strings.Contains(out, d) {
					t.Errorf("stdout has %q:\n%s\nstderr:\n%s", d, out, errs)
				}
			}
		})
	}
	if got := n.loCanary.Accepted.Load(); got != 1 {
		t.Errorf("the host's loopback canary got %d connection(s), want only the control", got)
	}
	if got := n.ipCanary.Accepted.Load(); got != 1 {
		t.Errorf("the unlisted address's canary got %d connection(s), want only the control", got)
	}
	if got := n.udpHits.get(); got != udpBase {
		t.Errorf("the UDP canaries got %d datagram(s) from sandboxes", got-udpBase)
	}
	if got := n.api.Hits.Load(); got < 3 {
		t.Errorf("the allowed upstream got %d requests, want the curl, Go and fence-check ones", got)
	}
}

// TestNativeProxiedPlaceholders: the sandbox environment holds the
// placeholder of a secret, never its value, and vak run prints neither; the
// gateway swaps it for the real value only toward the host it is bound to
// (a request carrying it to another allowed host is refused, and that host
// receives nothing; the same request without it goes through).
func TestNativeProxiedPlaceholders(t *testing.T) {
	n := newNativeNet(t)
	code, out, errs := n.run(t, `echo "KEY=$NATIVE_KEY"; env | grep -c `+nativeSecret+` ; `+
		`curl -sS --max-time 10 -H "X-Key: $NATIVE_KEY" `+n.url(n.api, "api.test")+`; `+
		`curl -sS --max-time 10 -H "X-Key: $NATIVE_KEY" `+n.url(n.other, "other.test")+`; `+
		`curl -sS --max-time 10 -H "X-Key: none" `+n.url(n.other, "other.test"))
	if code != 0 && code != 1 {
		t.Fatalf("vak run: exit %d: %s", code, errs)
	}
	if strings.Contains(out, nativeSecret) || strings.Contains(errs, nativeSecret) {
		t.Fatalf("the real secret reached the sandbox or vak's output:\n%s\n%s", out, errs)
	}
	var ph string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "KEY="); ok {
			ph = v
		}
	}
	if !strings.HasPrefix(ph, "vakph_") {
		t.Fatalf("sandbox env NATIVE_KEY = %q, want a placeholder:\n%s\n%s", ph, out, errs)
	}
	if !strings.Contains(out, "UPSTREAM-api") || !strings.Contains(out, "placeholder of secret NATIVE_KEY in request header X-Key to other.test is not allowed") || !strings.Contains(out, "UPSTREAM-other") {
		t.Fatalf("want the bound host answered, the placeholder refused toward other.test, and other.test answered without it:\n%s\n%s", out, errs)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if got := n.seen["api"]; len(got) != 1 || got[0] != nativeSecret {
		t.Errorf("the bound host received X-Key %q, want the real value", got)
	}
	if got := n.seen["other"]; len(got) != 1 || got[0] != "none" {
		t.Errorf("another allowed host received X-Key %q, want only the request without the placeholder", got)
	}
	// `vak gateway env` is where placeholders are listed.
	sock := filepath.Join(n.state, "vak", ondemand.DirName, "admin.sock")
	code, envOut, errs := vakMain(t, n.cfg, "gateway", "env", "--socket", sock)
	if code != 0 || !strings.Contains(envOut, "NATIVE_KEY="+ph) || strings.Contains(envOut, nativeSecret) {
		t.Errorf("vak gateway env: %d %q %q", code, envOut, errs)
	}
	// vak doctor shows how the network attaches and that the gateway runs,
	// and no secret.
	code, doc, errs := vakMain(t, n.cfg, "doctor", "-w", n.ws, "--backend", "landlock", "--network", "proxied")
	if code != 0 || !strings.Contains(doc, "a fenced namespace toward the on-demand gateway in "+filepath.Join(n.state, "vak", ondemand.DirName)+", running") || strings.Contains(doc, nativeSecret) || strings.Contains(doc, ph) {
		t.Errorf("vak doctor: %d\n%s\n%s", code, doc, errs)
	}
}

// TestNativeProxiedGatewayDown: a gateway that cannot start means exit 69
// and nothing ran; a gateway that dies during a run leaves the sandbox
// with no way out (its connections fail, nothing leaks), and the next run
// starts a new one.
func TestNativeProxiedGatewayDown(t *testing.T) {
	n := newNativeNet(t)
	t.Run("cannot start", func(t *testing.T) {
		bad := writeConfig(t, "version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nhosts = [\"api.test\"]\n[gateway]\nextra_ca_bundles = [\""+filepath.Join(t.TempDir(), "missing.pem")+"\"]\n")
		code, out, errs := vakMain(t, bad, "run", "-w", n.ws, "--backend", "landlock", "--network", "proxied", "--", "sh", "-c", "echo ran > ran.txt; echo ran")
		if code != ExitUnavailable || strings.Contains(out, "ran") || !strings.Contains(errs, "nothing was run") || !strings.Contains(errs, "missing.pem") {
			t.Fatalf("exit %d, want %d; stdout %q; stderr %q", code, ExitUnavailable, out, errs)
		}
		if _, err := os.Stat(filepath.Join(n.ws, "ran.txt")); err == nil {
			t.Fatal("the command ran")
		}
	})
	t.Run("dies mid-run", func(t *testing.T) {
		api := n.url(n.api, "api.test")
		script := "curl -sS --max-time 10 " + api + "; touch phase1; while [ ! -e go ]; do sleep 0.05; done; " +
			"curl -sS --max-time 5 " + api + "; echo second=$?; ./probe dns api.test 1.1.1.1 2s"
		type result struct {
			code      int
			out, errs string
		}
		done := make(chan result, 1)
		go func() {
			code, out, errs := n.run(t, script)
			done <- result{code, out, errs}
		}()
		waitFor(t, "the first request", func() bool { _, err := os.Stat(filepath.Join(n.ws, "phase1")); return err == nil })
		hits := n.api.Hits.Load()
		pidFile := filepath.Join(n.state, "vak", ondemand.DirName, "gateway.pid")
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the gateway gone", func() bool { return syscall.Kill(pid, 0) != nil })
		os.WriteFile(filepath.Join(n.ws, "go"), nil, 0o644)
		r := <-done
		if !strings.Contains(r.out, "UPSTREAM-api") {
			t.Fatalf("control: the first request failed:\n%s\n%s", r.out, r.errs)
		}
		if strings.Count(r.out, "UPSTREAM-api") != 1 || strings.Contains(r.out, "second=0") || !strings.Contains(r.out, "FAIL") {
			t.Fatalf("with the gateway gone the sandbox still got out:\n%s\n%s", r.out, r.errs)
		}
		if got := n.api.Hits.Load(); got != hits {
			t.Fatalf("the upstream got %d request(s) after the gateway died", got-hits)
		}
		os.Remove(filepath.Join(n.ws, "go"))
		os.Remove(filepath.Join(n.ws, "phase1"))
		// The next run starts a new gateway.
		code, out, errs := n.run(t, "curl -sS --max-time 10 "+api)
		if code != 0 || !strings.Contains(out, "UPSTREAM-api") {
			t.Fatalf("the next run: %d %q %q", code, out, errs)
		}
	})
}

// stopOnDemand stops the on-demand gateway of the state dir in
// $XDG_STATE_HOME (it must not outlive the test).
func stopOnDemand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ondemand.Stop(ctx, filepath.Join(os.Getenv("XDG_STATE_HOME"), "vak")); err != nil {
		t.Errorf("stop the on-demand gateway: %v", err)
	}
}

// TestMCPNativeProxied: `vak mcp --network proxied` on the landlock backend
// gives its bash tool the same fenced network as vak run: the allowed host
// answers through the on-demand gateway (which the server holds for its
// lifetime), a denied one gets the gateway's 403, the host's loopback stays
// out of reach.
func TestMCPNativeProxied(t *testing.T) {
	n := newNativeNet(t)
	stderr := wire.NewTailBuffer(64 << 10)
	cmd := exec.Command(workerExecutable, "--config", n.cfg, "mcp", "--workspace", n.ws, "--backend", "landlock", "--network", "proxied")
	cmd.Stderr = stderr
	ctx := context.Background()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\nstderr: %s", err, stderr.String())
	}
	bash := func(command string) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Stdout string `json:"stdout"`
		}
		data, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(data, &out)
		return out.Stdout
	}
	if out := bash("curl -sS --max-time 10 " + n.url(n.api, "api.test")); !strings.Contains(out, "UPSTREAM-api") {
		t.Errorf("allowed host through vak mcp: %q\nstderr: %s", out, stderr.String())
	}
	if out := bash("curl -sS --max-time 10 https://denied.test:" + strconv.Itoa(n.api.Port()) + "/"); !strings.Contains(out, "403 Forbidden") || strings.Contains(out, "UPSTREAM") {
		t.Errorf("denied host through vak mcp: %q", out)
	}
	if out := bash("./probe connect 127.0.0.1:" + strconv.Itoa(n.loCanary.Port()) + " 3s"); !strings.Contains(out, "FAIL") {
		t.Errorf("the host's loopback through vak mcp: %q", out)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if got := n.loCanary.Accepted.Load(); got != 0 {
		t.Errorf("the host's loopback canary got %d connection(s)", got)
	}
}
