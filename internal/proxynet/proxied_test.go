package proxynet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"vak/internal/catrust"
	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/receipts"
	"vak/internal/testenv"
)

// The hermetic "internet": an HTTPS upstream with a certificate from its own
// test CA (which the gateway trusts through extra_ca_bundles), a canary that
// counts every TCP connection, UDP datagram, DNS query and ICMP echo, and a
// counting listener on the host. The gateway's DNS overrides point test
// names at them. A sandboxed container joins the workspace's topology and
// tries every way out; only policy-allowed HTTPS reaches anything.
func TestProxiedTopology(t *testing.T) {
	testenv.CheckLeftovers(t)
	img := testenv.TestNetImage(t)
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := testenv.StartInternet(t, img, "allowed.test", "unbound.test")
	certs, inet, upIP, canIP := in.Certs, in.Network, in.UpstreamIP, in.CanaryIP
	inetGW := testenv.Docker(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", inet)

	// A listener on the host, on every address: no sandbox may reach it.
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	var hostHits atomic.Int64
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			hostHits.Add(1)
			c.Close()
		}
	}()
	hostPort := hostLn.Addr().(*net.TCPAddr).Port

	var rnd [6]byte
	rand.Read(rnd[:])
	secret := "real-secret-" + hex.EncodeToString(rnd[:])
	base, _ := filepath.EvalSymlinks(t.TempDir())
	xdg := filepath.Join(base, "xdg-state")
	stateDir := filepath.Join(xdg, "vak")
	os.MkdirAll(stateDir, 0o700)
	cfgFile := filepath.Join(base, "config.toml")
	os.WriteFile(cfgFile, []byte(fmt.Sprintf(`version = 1
[sandbox]
backend = "docker"
image = %q
[network]
policy = "proxied"
[[network.rules]]
name = "test upstreams"
action = "allow"
hosts = ["allowed.test", "unbound.test"]
cidrs = ["%s/32"]
[network.dns.overrides]
"allowed.test" = [%q]
"unbound.test" = [%q]
"canary.test" = [%q]
[gateway]
extra_ca_bundles = [%q]
[secrets.TOKEN]
value = %q
hosts = ["allowed.test"]
`, img, upIP, upIP, upIP, canIP, certs.CA, secret)), 0o600)
	ws, err := paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, "ws")))
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: testenv.TestID(t)}
	// The netclient exits when its rules change (tested in netfence); here it
	// re-verifies slowly, so that the tamper phases below test what the
	// topology alone guarantees with the rules gone.
	o := Options{Engine: cli, Workspace: ws, Binary: testenv.Vak(t), Sections: sectionsOf(t, cfgFile), ConfigFile: cfgFile, StateDir: stateDir, Labels: labels, VerifyInterval: 10 * time.Minute}
	n, err := Ensure(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer Teardown(context.Background(), cli, stateDir, ws, true)
	// Test plumbing: the gateway (and only it) reaches the test internet.
	testenv.Docker(t, "network", "connect", inet, n.Gateway)

	// A second Ensure for the workspace reuses the running gateway.
	if n2, err := Ensure(ctx, o); err != nil || n2.GatewayIP != n.GatewayIP {
		t.Fatalf("second Ensure did not reuse the topology: %+v %v", n2, err)
	} else {
		n2.Release()
	}

	// The sandboxed container: joins the netclient's namespace, no
	// capabilities, trust files and placeholders only.
	att := n.Attachment()
	args := []string{"run", "-d", "--network", att.Mode, "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "-v", att.Binds[0]}
	for _, e := range att.Env {
		args = append(args, "-e", e)
	}
	for k, v := range att.Labels {
		args = append(args, "--label", k+"="+v)
	}
	args = append(append(args, testenv.LabelArgs(t)...), img, "sleep", "3600")
	sbID := testenv.Docker(t, args...)
	defer exec.Command("docker", "rm", "-f", sbID).Run()
	n.Release() // the sandbox container keeps the topology from now on
	sb := func(cmd string) string {
		t.Helper()
		out, _ := testenv.Exec(t, sbID, "sh", "-c", cmd)
		return strings.TrimSpace(out)
	}
	canaryZero := func(when string) {
		t.Helper()
		time.Sleep(200 * time.Millisecond)
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 || c.DNS != 0 {
			t.Errorf("%s: the canary saw traffic: %+v", when, c)
		}
		if h := hostHits.Load(); h != 0 {
			t.Errorf("%s: the host listener accepted %d connections", when, h)
		}
	}

	// Controls: the canary and the host listener count (from a plain
	// container on the test internet).
	if out, _ := exec.Command("docker", append(append([]string{"run", "--rm"}, testenv.LabelArgs(t)...), "--network", inet, img, "probe", "connect", canIP+":80", "3s")...).CombinedOutput(); !strings.Contains(string(out), "OK") {
		t.Fatalf("control: canary unreachable: %s", out)
	}
	if c := testenv.ResetCanary(t, canIP); c.TCP == 0 {
		t.Fatalf("control: the canary did not count a connection: %+v", c)
	}

	t.Run("AllowedHTTPSVerifiedAgainstVakCA", func(t *testing.T) {
		out := sb("probe tls https://allowed.test/status/200")
		if !strings.HasPrefix(out, "OK 200") || !strings.Contains(out, `issuer="vak gateway CA"`) {
			t.Fatalf("allowed HTTPS with verification on: %s", out)
		}
		if sb("echo $SSL_CERT_FILE") != catrust.Dir+"/"+catrust.BundleFile {
			t.Errorf("SSL_CERT_FILE not set")
		}
	})
	t.Run("DisallowedNameRefused", func(t *testing.T) {
		for _, u := range []string{"https://denied.test/", "http://canary.test/", "https://example.com/"} {
			if out := sb("probe http " + u + " 5s"); strings.HasPrefix(out, "OK 200") {
				t.Errorf("%s: %s", u, out)
			}
		}
		canaryZero("disallowed names")
	})
	t.Run("Secrets", func(t *testing.T) {
		ph := sb("echo $TOKEN")
		if !strings.HasPrefix(ph, "vakph_") || strings.Contains(sb("env"), secret) {
			t.Fatalf("the container sees %q (the real value must never be inside)", ph)
		}
		testenv.ResetUpstream(t, upIP)
		out := sb(`probe http -H "Authorization: Bearer $TOKEN" https://allowed.test/sink 5s`)
		if !strings.HasPrefix(out, "OK 200") || strings.Contains(out, secret) {
			t.Fatalf("bound host: %s", out)
		}
		reqs := testenv.UpstreamRequests(t, upIP)
		if reqs.Count != 1 || strings.Join(reqs.Requests[0].Headers["Authorization"], "") != "Bearer "+secret {
			t.Fatalf("the upstream did not receive the real value: %+v", reqs)
		}
		// The same placeholder toward an allowed but unbound host: blocked.
		testenv.ResetUpstream(t, upIP)
		if out := sb(`probe http -H "Authorization: Bearer $TOKEN" https://unbound.test/sink 5s`); !strings.Contains(out, "403") {
			t.Errorf("placeholder to an unbound host was not blocked: %s", out)
		}
		if reqs := testenv.UpstreamRequests(t, upIP); reqs.Count != 0 {
			t.Errorf("the unbound host received the request: %+v", reqs)
		}
		// An allowed host echoing the real value gets it redacted.
		out = sb(`probe http -H "X-Echo: $TOKEN" https://allowed.test/echo 5s`)
		if strings.Contains(out, secret) {
			t.Errorf("a real value reached the sandbox in a response: %s", out)
		}
	})
	t.Run("ThroughVakRun", func(t *testing.T) {
		cmd := exec.Command(testenv.Vak(t), "--config", cfgFile, "run", "-w", ws, "--network", "proxied", "--", "sh", "-c", "probe tls https://allowed.test/status/200; echo $TOKEN")
		cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+xdg)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), `OK 200 issuer="vak gateway CA"`) || !strings.Contains(string(out), "vakph_") {
			t.Fatalf("vak run --network proxied: %v\n%s", err, out)
		}
	})
	t.Run("EscapesNeverReachTheCanaryOrHost", func(t *testing.T) {
		testenv.ResetCanary(t, canIP)
		attempts := []string{
			"probe http http://" + canIP + "/ 3s", // direct IP
			"probe connect " + canIP + ":22 3s",   // raw TCP to the IP
			"probe connect " + canIP + ":8080 3s",
			"probe dns leak-" + hex.EncodeToString(rnd[:3]) + ".exfil.test 127.0.0.11", // DNS, default resolver
			"probe dns leak2-" + hex.EncodeToString(rnd[:3]) + ".exfil.test " + canIP,  // DNS, chosen server
			"probe dns --tcp leak3.exfil.test " + canIP,
			"probe udp " + canIP + ":9 2s",
			"probe quic " + canIP + ":443 2s",
			"probe ping " + canIP + " 2s",
			"probe connect [fd00::1]:80 2s",
			fmt.Sprintf("probe http http://172.17.0.1:%d/ 3s", hostPort),
			fmt.Sprintf("probe http http://%s:%d/ 3s", inetGW, hostPort),
			fmt.Sprintf("probe http http://%v:%d/ 3s", n.GatewayIP, hostPort),
			"probe http http://169.254.169.254/latest/meta-data/ 3s",
		}
		// All at once (most wait out their timeout).
		outs := testenv.ProbeOutputs(t, sb(testenv.ProbeScript(attempts)), attempts)
		for i, a := range attempts {
			// DNS for a denied name may get the gateway's block answer (the
			// sinkhole), never a real one.
			if out := outs[i]; testenv.ProbeEscaped(out) {
				t.Errorf("%s: %s", a, out)
			}
		}
		// Host and SNI spoofing: the gateway decides on the name and dials
		// the address it resolved itself — the upstream answers, never the
		// canary whose IP the client chose.
		for _, a := range []string{
			"probe http --host allowed.test http://" + canIP + "/ 3s",
			"probe http --sni allowed.test https://" + canIP + "/ 3s",
		} {
			if out := sb(a); strings.Contains(out, "canary") || (strings.HasPrefix(out, "OK 200") && !strings.Contains(out, `"local":"`+upIP+`:`)) {
				t.Errorf("%s: answered by someone other than the named upstream: %s", a, out)
			}
		}
		canaryZero("escape attempts")
	})
	t.Run("FailsClosedWithGatewayStopped", func(t *testing.T) {
		testenv.Docker(t, "stop", "-t", "1", n.Gateway)
		defer testenv.Docker(t, "start", n.Gateway)
		attempts := []string{"probe tls https://allowed.test/ 3s", "probe http http://" + canIP + "/ 3s", "probe dns allowed.test 127.0.0.11"}
		for i, out := range testenv.ProbeOutputs(t, sb(testenv.ProbeScript(attempts)), attempts) {
			if strings.HasPrefix(out, "OK") {
				t.Errorf("with the gateway stopped, %s: %s", attempts[i], out)
			}
		}
		canaryZero("gateway stopped")
	})
	t.Run("FailsClosedWithRulesFlushed", func(t *testing.T) {
		// As the netclient itself: flush every rule in the namespace.
		if out, code := testenv.Exec(t, n.Netclient, "/vak", "netclient", "unfence"); code != 0 {
			t.Fatalf("unfence: %s", out)
		}
		attempts := []string{"probe connect " + canIP + ":80 3s", "probe udp " + canIP + ":9 2s", "probe dns x.exfil.test " + canIP, fmt.Sprintf("probe connect 172.17.0.1:%d 3s", hostPort)}
		outs := testenv.ProbeOutputs(t, sb(testenv.ProbeScript(attempts)), attempts)
		if !strings.Contains(outs[0], "FAIL") {
			t.Errorf("after the flush the canary is reachable: %s", outs[0])
		}
		for i, out := range outs {
			if strings.HasPrefix(out, "OK") {
				t.Errorf("after the flush, %s: %s", attempts[i], out)
			}
		}
		canaryZero("rules flushed")
		// A process that gained NET_ADMIN also points the default route at
		// the gateway: the gateway does not forward, so still nothing.
		tamper, _ := dockerOut(append(append([]string{"run", "--rm", "--network", "container:" + sbID, "--cap-drop", "ALL", "--cap-add", "NET_ADMIN"}, testenv.LabelArgs(t)...),
			img, "sh", "-c", "ip route replace default via "+n.GatewayIP.String()+" && ip route")...)
		if !strings.Contains(sb("ip -o addr"), "eth0") {
			t.Fatal("the namespace lost its interface: the attempts below would prove nothing")
		}
		if !strings.Contains(tamper, "default via "+n.GatewayIP.String()) {
			t.Fatalf("tamper: %s\n%s", tamper, sb("ip addr; ip route"))
		}
		if out := sb("ip route"); !strings.Contains(out, "default via "+n.GatewayIP.String()) {
			t.Fatalf("default route not set: %s", out)
		}
		attempts = []string{"probe connect " + canIP + ":80 3s", "probe udp " + canIP + ":9 2s", fmt.Sprintf("probe connect %s:%d 3s", inetGW, hostPort), fmt.Sprintf("probe connect 172.17.0.1:%d 3s", hostPort)}
		for i, out := range testenv.ProbeOutputs(t, sb(testenv.ProbeScript(attempts)), attempts) {
			if strings.HasPrefix(out, "OK") {
				t.Errorf("with the route via the gateway, %s: %s", attempts[i], out)
			}
		}
		canaryZero("route via the gateway")
	})

	// Teardown in reverse leaves nothing; the receipts survive it.
	exec.Command("docker", "rm", "-f", sbID).Run()
	if err := Teardown(ctx, cli, stateDir, ws, false); err != nil {
		t.Fatal(err)
	}
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		if out := testenv.Docker(t, append(kind, "--filter", "label="+LabelKey+"="+n.Key)...); out != "" {
			t.Errorf("left behind: docker %v: %s", kind, out)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(stateDir, "receipts", "proxynet-"+n.Key, "*.jsonl"))
	if len(logs) == 0 {
		t.Fatal("no receipts were kept")
	}
	var all strings.Builder
	for _, l := range logs {
		if _, err := receipts.VerifyFile(l); err != nil {
			t.Errorf("receipts %s: %v", l, err)
		}
		data, _ := os.ReadFile(l)
		all.Write(data)
	}
	if !strings.Contains(all.String(), "allowed.test") || strings.Contains(all.String(), secret) {
		t.Errorf("receipts: want allowed.test recorded and no secret value")
	}
}

func mkdir(t *testing.T, p string) string {
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func dockerOut(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}
