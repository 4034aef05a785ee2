package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"vak/internal/testenv"
	"vak/internal/testenv/testnet"
)

// TestInContainers runs the upstream and the canary from the test image on
// a labelled bridge network and probes them from a third container, the
// way the proxied-network tests and the benchmark use them.
func TestInContainers(t *testing.T) {
	img := testenv.TestNetImage(t)
	testenv.CheckLeftovers(t)
	certs := testenv.GenCerts(t, "allowed.test")
	network := testenv.CreateNetwork(t, testenv.UniqueName("testnet"))

	up, upIP := testenv.RunContainer(t, testenv.UniqueName("upstream"), network,
		"--network-alias", "allowed.test", "-v", certs.Dir+":/certs:ro",
		img, "/bin/testnet", "upstream", "--cert", "/certs/cert.pem", "--key", "/certs/key.pem")
	can, canIP := testenv.RunContainer(t, testenv.UniqueName("canary"), network, img, "/bin/testnet", "canary")
	client, _ := testenv.RunContainer(t, testenv.UniqueName("client"), network,
		"-v", certs.CA+":/etc/test-ca.pem:ro", "-e", "SSL_CERT_FILE=/etc/test-ca.pem",
		"--cap-drop", "ALL", img, "sleep", "3600")
	testenv.WaitReady(t, up)
	testenv.WaitReady(t, can)
	if upIP == "" || canIP == "" {
		t.Fatalf("no IPs: upstream %q, canary %q", upIP, canIP)
	}

	probe := func(t *testing.T, wantCode int, args ...string) string {
		t.Helper()
		out, code := testenv.Exec(t, client, append([]string{"/bin/probe"}, args...)...)
		if code != wantCode {
			t.Fatalf("probe %s: exit %d, want %d:\n%s", strings.Join(args, " "), code, wantCode, out)
		}
		return out
	}
	echoOf := func(t *testing.T, out string) testnet.Echo {
		t.Helper()
		_, js, ok := strings.Cut(out, "{")
		var e testnet.Echo
		if !ok || json.Unmarshal([]byte("{"+strings.TrimSpace(js)), &e) != nil {
			t.Fatalf("no echo JSON in %q", out)
		}
		return e
	}

	t.Run("upstream", func(t *testing.T) {
		out := probe(t, 0, "tls", "https://allowed.test/hello?x=1")
		if !strings.HasPrefix(out, `OK 200 issuer="vak testnet CA" subject="allowed.test" proto=HTTP/2.0 body={`) {
			t.Fatalf("probe tls: %s", out)
		}
		if e := echoOf(t, out); e.Host != "allowed.test" || e.ServerName != "allowed.test" || e.RawQuery != "x=1" {
			t.Errorf("echo: %+v", e)
		}
		// Verification really is on: the certificate does not cover the IP.
		if out := probe(t, 1, "tls", "https://"+upIP+"/"); !strings.Contains(out, "FAIL") || !strings.Contains(out, "certificate") {
			t.Errorf("probe tls by IP: %s", out)
		}
		if out := probe(t, 0, "tls", "https://allowed.test/status/503"); !strings.HasPrefix(out, "OK 503 ") {
			t.Errorf("status: %s", out)
		}
		// Host spoofing keeps SNI; SNI spoofing keeps Host and says verification was off.
		out = probe(t, 0, "http", "-H", "X-Probe: 1", "--host", "spoofed.test", "https://allowed.test/h")
		if e := echoOf(t, out); e.Host != "spoofed.test" || e.ServerName != "allowed.test" || e.Headers["X-Probe"][0] != "1" {
			t.Errorf("--host: %+v", e)
		}
		out = probe(t, 0, "http", "--sni", "spoofed.test", "https://allowed.test/s")
		if e := echoOf(t, out); !strings.HasPrefix(out, "OK 200 verify=off sni=spoofed.test ") || e.Host != "allowed.test" || e.ServerName != "spoofed.test" {
			t.Errorf("--sni: %s", out)
		}
		// The host sees what the upstream served, on its control port.
		reqs := testenv.UpstreamRequests(t, upIP)
		if reqs.Count != 4 || reqs.Requests[len(reqs.Requests)-1].ServerName != "spoofed.test" {
			t.Errorf("upstream requests: %+v", reqs)
		}
		testenv.ResetUpstream(t, upIP)
		if n := testenv.UpstreamRequests(t, upIP).Count; n != 0 {
			t.Errorf("after reset: %d requests", n)
		}
	})

	t.Run("canary", func(t *testing.T) {
		testenv.ResetCanary(t, canIP)
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 {
			t.Fatalf("fresh canary counts %+v", c)
		}
		for _, args := range [][]string{
			{"connect", canIP + ":22"},
			{"connect", canIP + ":443"},
			{"http", "http://" + canIP + ":80/"},
			{"http", "http://" + canIP + ":8080/"},
			{"udp", canIP + ":9"},
			{"quic", canIP + ":443"},
			{"dns", "random-name.example", canIP},
			{"dns", "--tcp", "random-name.example", canIP + ":53"},
			{"ping", canIP},
		} {
			probe(t, 0, args...)
		}
		c := testenv.CanaryCounts(t, canIP)
		wantICMP := int64(1)
		if c.ICMPError != "" {
			t.Logf("canary does not count ICMP: %s", c.ICMPError)
			wantICMP = 0
		}
		want := map[string]int64{"tcp/22": 1, "tcp/443": 1, "tcp/80": 1, "tcp/8080": 1, "tcp/53": 1,
			"udp/9": 1, "udp/443": 1, "udp/53": 1, "dns/53": 2}
		if wantICMP == 1 {
			want["icmp"] = 1
		}
		if c.TCP != 5 || c.UDP != 3 || c.DNS != 2 || c.ICMP != wantICMP || c.Total != 8+wantICMP || fmt.Sprint(c.ByPort) != fmt.Sprint(want) {
			t.Errorf("counts %+v\nwant by_port %v", c, want)
		}
		if old := testenv.ResetCanary(t, canIP); old.Total != c.Total {
			t.Errorf("reset returned %+v", old)
		}
		if c := testenv.CanaryCounts(t, canIP); c.Total != 0 || len(c.ByPort) != 0 {
			t.Errorf("after reset: %+v", c)
		}
	})

	t.Run("bench", func(t *testing.T) {
		out := probe(t, 0, "bench", "https://allowed.test/bytes/64", "200", "4")
		var b testnet.Bench
		if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(out), "OK ")), &b); err != nil {
			t.Fatalf("bench output %q: %v", out, err)
		}
		if b.N != 200 || b.Concurrency != 4 || b.Errors != 0 || b.Proto != "HTTP/2.0" || b.Bytes != 200*64 ||
			b.MedianMS <= 0 || b.P90MS < b.MedianMS || b.P99MS < b.P90MS || b.MaxMS < b.P99MS || b.RPS <= 0 {
			t.Errorf("bench result not sane: %+v", b)
		}
		// Errors make it FAIL, with the JSON still printed.
		if out := probe(t, 1, "bench", "https://allowed.test/status/500", "4", "2"); !strings.HasPrefix(out, "FAIL {") || !strings.Contains(out, `"errors":4`) {
			t.Errorf("failing bench: %s", out)
		}
	})
}
