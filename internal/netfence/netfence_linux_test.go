package netfence

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"

	"vak/internal/egress/proxyproto"
	"vak/internal/testenv"
)

// The test builds two network namespaces joined by a veth pair:
//
//	sb (10.231.N.2, default route via .1)  <->  gw (10.231.N.1 gateway, 10.231.N.3 canary)
//
// Without the fence, sb reaches the canary directly (the control). With it,
// TCP must arrive at the gateway's transparent port behind a PROXY v2 header
// naming the canary, DNS must arrive at the gateway's resolver, and nothing
// may reach the canary.

const roleEnv = "VAK_NETFENCE_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "gateway":
		gatewayRole()
		return
	case "client":
		clientRole()
		return
	case "inner":
		innerRole()
		return
	case "local":
		localRole()
		return
	case "pod":
		podRole()
		return
	case "verify":
		if err := Verify(testConfig(os.Getenv("VAK_NETFENCE_NET"))); err != nil {
			fmt.Println("VERIFY-FAILED", err)
			os.Exit(1)
		}
		fmt.Println("VERIFIED")
		return
	}
	os.Exit(m.Run())
}

func testConfig(net3 string) Config {
	c := Config{
		Gateway:         netip.MustParseAddr(net3 + ".1"),
		TransparentPort: DefaultTransparentPort,
		ProxyPort:       DefaultProxyPort,
		DNSPort:         DefaultDNSPort,
		ForwarderPort:   DefaultForwarderPort,
	}
	// Nested mode: VAK_NETFENCE_UPLINK names the sandbox-side interface.
	if up := os.Getenv("VAK_NETFENCE_UPLINK"); up != "" {
		c.NestedPool = DefaultNestedPool
		c.Uplink = up
	}
	return c
}

// innerRole is a service in an inner container: it logs connections.
func innerRole() {
	ln, err := net.Listen("tcp4", "0.0.0.0:8080")
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Printf("INNER-TCP from=%v\n", c.RemoteAddr())
			c.Close()
		}
	}()
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
}

// gatewayRole logs every event on stdout, one line each.
func gatewayRole() {
	n := os.Getenv("VAK_NETFENCE_NET")
	var mu sync.Mutex
	say := func(f string, a ...any) { mu.Lock(); fmt.Printf(f+"\n", a...); mu.Unlock() }
	tcp := func(addr string, handle func(net.Conn)) {
		ln, err := net.Listen("tcp4", addr)
		if err != nil {
			say("ERROR %v", err)
			return
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); handle(c) }()
			}
		}()
	}
	udp := func(addr, tag string) {
		pc, err := net.ListenPacket("udp4", addr)
		if err != nil {
			say("ERROR %v", err)
			return
		}
		go func() {
			buf := make([]byte, 512)
			for {
				k, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				say("%s from=%v len=%d", tag, from, k)
				pc.WriteTo([]byte(tag), from)
			}
		}()
	}
	tcp(n+".1:15001", func(c net.Conn) {
		h, err := proxyproto.Read(c)
		if err != nil {
			say("TRANSPARENT bad-header %v", err)
			return
		}
		say("TRANSPARENT src=%v dst=%v", h.Source, h.Destination)
		c.Write([]byte("via-gateway\n"))
	})
	tcp(n+".1:53", func(c net.Conn) { say("DNS-TCP from=%v", c.RemoteAddr()) })
	udp(n+".1:53", "DNS-UDP")
	tcp(n+".3:80", func(c net.Conn) { say("CANARY-TCP from=%v", c.RemoteAddr()) })
	udp(n+".3:443", "CANARY-UDP")
	udp(n+".3:53", "CANARY-DNS")
	say("READY")
	io.Copy(io.Discard, os.Stdin)
}

// clientRole fences its namespace and runs the forwarder.
func clientRole() {
	c := testConfig(os.Getenv("VAK_NETFENCE_NET"))
	if err := DisableIPv6(); err != nil {
		fmt.Println("ERROR", err)
	}
	if err := Apply(c); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", c.ForwarderPort))
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	f := &Forwarder{Gateway: netip.AddrPortFrom(c.Gateway, c.TransparentPort)}
	go f.Serve(ln)
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin)
}

type role struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []string
	ready chan struct{}
}

func startRole(t *testing.T, ns, name, net3 string, env ...string) *role {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), roleEnv+"="+name, "VAK_NETFENCE_NET="+net3), env...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &role{cmd: cmd, stdin: in, ready: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
			if sc.Text() == "READY" {
				close(r.ready)
			}
		}
	}()
	select {
	case <-r.ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s role never became ready: %v", name, r.log())
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	return r
}

func (r *role) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

func (r *role) count(prefix string) int {
	n := 0
	for _, l := range r.log() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v: %s", args, err, out)
	}
	return string(out)
}

func inNS(ns string, args ...string) string {
	out, _ := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out)
}

func netns(t *testing.T) (sb, gw, net3 string) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		testenv.Missing(t, testenv.EnvRequireDocker, "netfence tests need root and iproute2 to create network namespaces")
	}
	id := os.Getpid() % 200
	net3 = fmt.Sprintf("10.231.%d", id)
	sb, gw = fmt.Sprintf("vakt-sb-%d", os.Getpid()), fmt.Sprintf("vakt-gw-%d", os.Getpid())
	vs, vg := fmt.Sprintf("vks%d", os.Getpid()), fmt.Sprintf("vkg%d", os.Getpid())
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", sb).Run()
		exec.Command("ip", "netns", "del", gw).Run()
	})
	sh(t, "ip", "netns", "add", sb)
	sh(t, "ip", "netns", "add", gw)
	sh(t, "ip", "link", "add", vs, "type", "veth", "peer", "name", vg)
	sh(t, "ip", "link", "set", vs, "netns", sb)
	sh(t, "ip", "link", "set", vg, "netns", gw)
	sh(t, "ip", "-n", gw, "addr", "add", net3+".1/24", "dev", vg)
	sh(t, "ip", "-n", gw, "addr", "add", net3+".3/24", "dev", vg)
	sh(t, "ip", "-n", sb, "addr", "add", net3+".2/24", "dev", vs)
	for _, ns := range []string{sb, gw} {
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	sh(t, "ip", "-n", gw, "link", "set", vg, "up")
	sh(t, "ip", "-n", sb, "link", "set", vs, "up")
	sh(t, "ip", "-n", sb, "route", "add", "default", "via", net3+".1")
	return sb, gw, net3
}

func TestFenceInNamespaces(t *testing.T) {
	sb, gw, n := netns(t)
	probe := testenv.Probe(t)
	g := startRole(t, gw, "gateway", n)

	// Control: without the fence the sandbox namespace reaches the canary.
	if out := inNS(sb, probe, "connect", n+".3:80", "3s"); !strings.Contains(out, "OK") {
		t.Fatalf("control: canary unreachable without the fence: %s", out)
	}
	waitFor(t, func() bool { return g.count("CANARY-TCP") == 1 }, "control connection at the canary")

	startRole(t, sb, "client", n)
	verify := exec.Command("ip", "netns", "exec", sb, os.Args[0], "-test.run=^$")
	verify.Env = append(os.Environ(), roleEnv+"=verify", "VAK_NETFENCE_NET="+n)
	if out, err := verify.CombinedOutput(); err != nil || !strings.Contains(string(out), "VERIFIED") {
		t.Fatalf("rules not verified after Apply: %v %s", err, out)
	}

	// TCP to the canary (and to an internet address) goes to the gateway,
	// behind a PROXY v2 header naming the original destination.
	for _, dst := range []string{n + ".3:80", "1.1.1.1:443"} {
		inNS(sb, probe, "http", "http://"+dst+"/", "3s")
		waitFor(t, func() bool { return g.count("TRANSPARENT src="+n+".2:") > 0 && contains(g.log(), "dst="+dst) }, "transparent connection for "+dst)
	}
	// DNS to any server lands on the gateway's resolver.
	for _, srv := range []string{"8.8.8.8:53", n + ".3:53", "127.0.0.11:53"} {
		if out := inNS(sb, probe, "udp", srv, "3s"); !strings.Contains(out, "DNS-UDP") {
			t.Errorf("DNS to %s did not reach the gateway resolver: %s", srv, out)
		}
	}
	// Other UDP (QUIC on 443), IPv6 and direct connections are dropped.
	if out := inNS(sb, probe, "udp", n+".3:443", "2s"); strings.Contains(out, "OK") {
		t.Errorf("UDP to the canary got through: %s", out)
	}
	if out := inNS(sb, probe, "connect", "[fd00::3]:80", "2s"); strings.Contains(out, "OK") {
		t.Errorf("IPv6 got through: %s", out)
	}
	// A connection straight to the forwarder (not redirected) is refused.
	inNS(sb, probe, "http", fmt.Sprintf("http://127.0.0.1:%d/", DefaultForwarderPort), "2s")
	time.Sleep(200 * time.Millisecond)
	if got := g.count("CANARY"); got != 1 {
		t.Fatalf("the canary saw %d events with the fence up (1 is the control): %v", got-1, g.log())
	}
	if g.count("TRANSPARENT src=") != 2 {
		t.Errorf("unexpected transparent connections (a direct forwarder connection was relayed?): %v", g.log())
	}

	// Tampering is detected: flush the ruleset and Verify fails.
	sh(t, "ip", "netns", "exec", sb, "nft", "flush", "ruleset")
	verify = exec.Command("ip", "netns", "exec", sb, os.Args[0], "-test.run=^$")
	verify.Env = append(os.Environ(), roleEnv+"=verify", "VAK_NETFENCE_NET="+n)
	if out, err := verify.CombinedOutput(); err == nil || !strings.Contains(string(out), "VERIFY-FAILED") {
		t.Fatalf("Verify passed after the ruleset was flushed: %s", out)
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if ok() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestConfigValidate(t *testing.T) {
	good := testConfig("10.1.2")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mod := range []func(*Config){
		func(c *Config) { c.Gateway = netip.MustParseAddr("127.0.0.1") },
		func(c *Config) { c.Gateway = netip.MustParseAddr("fd00::1") },
		func(c *Config) { c.Gateway = netip.Addr{} },
		func(c *Config) { c.ForwarderPort = 0 },
		func(c *Config) { c.Pod, c.NestedPool = true, DefaultNestedPool },
	} {
		c := good
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

// TestPodRuleset: the pod fence is the netclient's ruleset plus an input
// chain (policy drop: loopback and replies only), and sets no sysctl.
func TestPodRuleset(t *testing.T) {
	c := testConfig("10.1.2")
	plain := build(c)
	c.Pod = true
	pod := build(c)
	if plain.noSysctl || !pod.noSysctl {
		t.Errorf("noSysctl: plain %v, pod %v", plain.noSysctl, pod.noSysctl)
	}
	if len(pod.chains) != len(plain.chains)+1 {
		t.Fatalf("pod chains %d, plain %d", len(pod.chains), len(plain.chains))
	}
	in := pod.chains[len(pod.chains)-1]
	if in.chain.Name != "input" || *in.chain.Hooknum != *nftables.ChainHookInput || *in.chain.Policy != nftables.ChainPolicyDrop || len(in.rules) != 2 {
		t.Errorf("input chain %+v with %d rules", in.chain, len(in.rules))
	}
}

// The netclient re-verifies its rules and exits when they change: its
// forwarder is then gone, and in Docker the namespace loses its interface.
func TestNetclientExitsOnTamper(t *testing.T) {
	sb, _, n := netns(t)
	vak := testenv.Vak(t)
	cmd := exec.Command("ip", "netns", "exec", sb, vak, "netclient", "--gateway", n+".1", "--verify-interval", "100ms")
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, func() bool { return strings.Contains(out.String(), "netclient: ready") }, "netclient ready")
	select {
	case err := <-done:
		t.Fatalf("netclient exited before any tampering: %v\n%s", err, out.String())
	case <-time.After(500 * time.Millisecond):
	}
	sh(t, "ip", "netns", "exec", sb, "nft", "flush", "ruleset")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(out.String(), "rules changed") {
			t.Fatalf("netclient exit after tampering: %v\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("netclient kept running with its rules flushed:\n%s", out.String())
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
