package proxynet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/testenv"
)

// innerProbe is one line of the egress matrix run inside an inner
// container (a compose service, a build's RUN step) by innerProbeScript:
// the probe command and what its line must show.
type innerProbe struct {
	name, cmd string
	ok        bool   // exit 0 expected
	want      string // in the output
}

// innerProbes is the egress matrix of issue 14 for canary address canIP,
// upstream address upIP: allowed 200 with the vak CA, denied 403, the
// canary's address ends at the gateway (403); UDP, QUIC (UDP 443, to the
// canary and to an allowed name), ICMP and IPv6 (a ULA and a global
// literal: the test network has no IPv6) reach nothing; DNS to a foreign
// resolver (the canary's address, UDP and TCP) is answered by the
// gateway's resolver (the configured override), never by that resolver.
func innerProbes(canIP, upIP string) []innerProbe {
	return []innerProbe{
		{"allowed", "probe tls https://allowed.test/status/200", true, `OK 200 issuer="vak gateway CA"`},
		{"denied", "probe tls https://denied.test/status/200", true, "OK 403"},
		{"canary-tcp", "probe http http://" + canIP + "/", true, "OK 403"},
		{"canary-udp", "probe udp " + canIP + ":9 2s", false, "FAIL"},
		{"quic-canary", "probe quic " + canIP + ":443 2s", false, "FAIL"},
		{"quic-allowed", "probe quic allowed.test:443 2s", false, "FAIL"},
		{"icmp-canary", "probe ping " + canIP + " 2s", false, "FAIL"},
		{"ipv6-ula", "probe connect [fd00::1]:80 2s", false, "FAIL"},
		{"ipv6-global", "probe connect [2001:db8::1]:443 2s", false, "FAIL"},
		{"dns-udp-canary", "probe dns --type A allowed.test " + canIP + ":53", true, "A " + upIP},
		{"dns-tcp-canary", "probe dns --tcp --type A allowed.test " + canIP + ":53", true, "A " + upIP},
	}
}

// writeInnerProbeScript writes probes.sh into dir: it runs every probe and
// prints one line each, "NAME rc=N OUTPUT" (output on one line).
func writeInnerProbeScript(t *testing.T, dir string, probes []innerProbe) {
	t.Helper()
	var b strings.Builder
	b.WriteString("#!/bin/sh\np() { n=$1; shift; o=$(\"$@\" 2>&1); rc=$?; echo \"$n rc=$rc $(echo $o)\"; }\n")
	for _, p := range probes {
		b.WriteString("p " + p.name + " " + p.cmd + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "probes.sh"), []byte(b.String()), 0o755); err != nil {
		t.Fatal(err)
	}
}

// checkInnerProbes checks probes.sh's output against probes.
func checkInnerProbes(t *testing.T, where, out string, probes []innerProbe) {
	t.Helper()
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if n, rest, ok := strings.Cut(strings.TrimSpace(l), " rc="); ok {
			lines[n] = rest
		}
	}
	for _, p := range probes {
		got, ok := lines[p.name]
		if !ok {
			t.Errorf("%s: no result for %s (%s)\n%s", where, p.name, p.cmd, out)
			continue
		}
		if strings.HasPrefix(got, "0 ") != p.ok || !strings.Contains(got, p.want) {
			t.Errorf("%s: %s: rc=%s (want exit 0 = %v, output containing %q)", where, p.cmd, got, p.ok, p.want)
		}
	}
}

// canaryControls shows that everything innerProbes sends toward the canary
// reaches it from the test internet (outside every sandbox): TCP, UDP,
// QUIC's UDP 443, ICMP echo (answered) and DNS, so a count of 0 from
// inside means something. The counts are reset afterwards.
func canaryControls(t *testing.T, inet, base, canIP string) {
	t.Helper()
	for _, c := range [][]string{
		{"probe", "connect", canIP + ":80"},
		{"probe", "udp", canIP + ":9", "2s"},
		{"probe", "quic", canIP + ":443", "2s"},
		{"probe", "ping", canIP, "2s"},
		{"probe", "dns", "--type", "A", "allowed.test", canIP + ":53", "2s"},
	} {
		out, err := dockerOut(append([]string{"run", "--rm", "--network", inet, "--label", testenv.TestLabel + "=1", base}, c...)...)
		if c[1] == "ping" && err != nil {
			t.Fatalf("control: %v from the test internet: %v %s", c, err, out)
		}
		t.Logf("control %v: %v %s", c, err, strings.TrimSpace(out))
	}
	c := testenv.ResetCanary(t, canIP)
	if c.TCP == 0 || c.ByPort["udp/9"] == 0 || c.ByPort["udp/443"] == 0 || c.DNS == 0 || (c.ICMPError == "" && c.ICMP == 0) {
		t.Fatalf("control: the canary did not count TCP, UDP, UDP 443 (QUIC), DNS and ICMP from the test internet: %+v", c)
	}
}
