package netfence

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"vak/internal/testenv"
)

// TestNestedFenceInNamespaces adds an "inner container" namespace behind the
// sandbox namespace (sb routes 10.213.0.0/24 to it, as a nested dockerd's
// bridge would), then checks that nested mode captures the inner namespace's
// traffic exactly as the sandbox's own: TCP to the gateway's transparent port
// behind a PROXY header naming the original destination, DNS to the gateway's
// resolver, everything else dropped; while the sandbox still reaches inner
// services directly.
func TestNestedFenceInNamespaces(t *testing.T) {
	sb, gw, n := netns(t)
	probe := testenv.Probe(t)
	uplink := fmt.Sprintf("vks%d", os.Getpid())
	in := fmt.Sprintf("vakt-in-%d", os.Getpid())
	vb, vi := fmt.Sprintf("vkb%d", os.Getpid()), fmt.Sprintf("vki%d", os.Getpid())
	t.Cleanup(func() { exec.Command("ip", "netns", "del", in).Run() })
	sh(t, "ip", "netns", "add", in)
	sh(t, "ip", "link", "add", vb, "type", "veth", "peer", "name", vi)
	sh(t, "ip", "link", "set", vb, "netns", sb)
	sh(t, "ip", "link", "set", vi, "netns", in)
	sh(t, "ip", "-n", sb, "addr", "add", "10.213.0.1/24", "dev", vb)
	sh(t, "ip", "-n", in, "addr", "add", "10.213.0.2/24", "dev", vi)
	sh(t, "ip", "-n", sb, "link", "set", vb, "up")
	sh(t, "ip", "-n", in, "link", "set", vi, "up")
	sh(t, "ip", "-n", in, "link", "set", "lo", "up")
	sh(t, "ip", "-n", in, "route", "add", "default", "via", "10.213.0.1")
	sh(t, "ip", "netns", "exec", sb, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	// Replies to the inner pool (Docker would masquerade; a route does here).
	sh(t, "ip", "-n", gw, "route", "add", "10.213.0.0/16", "via", n+".2")

	g := startRole(t, gw, "gateway", n)
	inner := startRole(t, in, "inner", n)

	// Controls: without the fence the inner namespace reaches the canary
	// (TCP and UDP) through sb, and sb reaches the inner service.
	if out := inNS(in, probe, "connect", n+".3:80", "3s"); !strings.Contains(out, "OK") {
		t.Fatalf("control: canary unreachable from the inner namespace without the fence: %s", out)
	}
	if out := inNS(in, probe, "udp", n+".3:443", "3s"); !strings.Contains(out, "CANARY-UDP") {
		t.Fatalf("control: canary UDP unreachable from the inner namespace: %s", out)
	}
	waitFor(t, func() bool { return g.count("CANARY-TCP") == 1 }, "control connection at the canary")
	if out := inNS(sb, probe, "connect", "10.213.0.2:8080", "3s"); !strings.Contains(out, "OK") {
		t.Fatalf("control: inner service unreachable from sb: %s", out)
	}
	waitFor(t, func() bool { return inner.count("INNER-TCP") == 1 }, "control connection at the inner service")

	nested := "VAK_NETFENCE_UPLINK=" + uplink
	startRole(t, sb, "client", n, nested)
	verify := func(env ...string) (string, error) {
		cmd := exec.Command("ip", "netns", "exec", sb, os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), roleEnv+"=verify", "VAK_NETFENCE_NET="+n), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := verify(nested); err != nil || !strings.Contains(out, "VERIFIED") {
		t.Fatalf("nested rules not verified after Apply: %v %s", err, out)
	}
	// The plain (non-nested) expectation does not accept the nested chains.
	if out, err := verify(); err == nil || !strings.Contains(out, "VERIFY-FAILED") {
		t.Fatalf("plain Verify accepted a namespace with nested chains: %v %s", err, out)
	}

	// Inner TCP, to the canary and to an internet address, goes to the
	// gateway behind a PROXY header naming the inner source and destination.
	for _, dst := range []string{n + ".3:80", "1.1.1.1:443"} {
		inNS(in, probe, "http", "http://"+dst+"/", "3s")
		waitFor(t, func() bool {
			return contains(g.log(), "TRANSPARENT src=10.213.0.2:") && contains(g.log(), "dst="+dst)
		}, "transparent connection for inner "+dst)
	}
	// Inner DNS to any server lands on the gateway's resolver.
	for _, srv := range []string{"8.8.8.8:53", n + ".3:53"} {
		if out := inNS(in, probe, "udp", srv, "3s"); !strings.Contains(out, "DNS-UDP") {
			t.Errorf("inner DNS to %s did not reach the gateway resolver: %s", srv, out)
		}
	}
	// Other UDP (QUIC), IPv6, and the forwarder's port on the bridge address
	// (it listens on loopback only) are not reachable.
	if out := inNS(in, probe, "udp", n+".3:443", "2s"); strings.Contains(out, "OK") || strings.Contains(out, "CANARY") {
		t.Errorf("inner UDP to the canary got through: %s", out)
	}
	if out := inNS(in, probe, "connect", "[fd00::3]:80", "2s"); strings.Contains(out, "OK") {
		t.Errorf("inner IPv6 got through: %s", out)
	}
	// The sandbox still reaches the inner service directly (the pool's
	// output accepts), not through the gateway.
	if out := inNS(sb, probe, "connect", "10.213.0.2:8080", "3s"); !strings.Contains(out, "OK") {
		t.Errorf("sb -> inner service failed with the nested fence: %s", out)
	}
	waitFor(t, func() bool { return inner.count("INNER-TCP") == 2 }, "sb connection at the inner service")
	time.Sleep(200 * time.Millisecond)
	if got := g.count("CANARY"); got != 2 {
		t.Fatalf("the canary saw %d events with the nested fence up (2 are the controls): %v", got-2, g.log())
	}
	if contains(g.log(), "TRANSPARENT src=10.213.0.2:") && contains(g.log(), "dst=10.213.0.2:8080") {
		t.Errorf("sb -> inner connection went through the gateway: %v", g.log())
	}

	// Tampering with a nested chain is detected.
	sh(t, "ip", "netns", "exec", sb, "nft", "flush", "chain", "inet", FilterTable, "forward")
	if out, err := verify(nested); err == nil || !strings.Contains(out, "VERIFY-FAILED") || !strings.Contains(out, "forward") {
		t.Fatalf("Verify passed after the forward chain was flushed: %s", out)
	}
}
