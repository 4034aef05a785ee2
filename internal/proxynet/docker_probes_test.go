package proxynet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/testenv"
)

// innerProbes is the egress matrix of issue 14 (run in one inner container
// by probeScript) for canary address canIP, upstream address upIP: allowed
// 200 with the vak CA, denied 403, the canary's address ends at the
// gateway (403); UDP, QUIC (UDP 443, to the canary and to an allowed
// name), ICMP and IPv6 (a ULA and a global literal: the test network has
// no IPv6) reach nothing; DNS to a foreign resolver (the canary's address,
// UDP and TCP) is answered by the gateway's resolver (the configured
// override), never by that resolver.
func innerProbes(canIP, upIP string) []probeCase {
	return []probeCase{
		{"probe tls https://allowed.test/status/200", true, `OK 200 issuer="vak gateway CA"`, false},
		{"probe tls https://denied.test/status/200", true, "OK 403", false},
		{"probe http http://" + canIP + "/", true, "OK 403", false},
		{"probe udp " + canIP + ":9 2s", false, "FAIL", false},
		{"probe quic " + canIP + ":443 2s", false, "FAIL", false},
		{"probe quic allowed.test:443 2s", false, "FAIL", false},
		{"probe ping " + canIP + " 2s", false, "FAIL", false},
		{"probe connect [fd00::1]:80 2s", false, "FAIL", false},
		{"probe connect [2001:db8::1]:443 2s", false, "FAIL", false},
		{"probe dns --type A allowed.test " + canIP + ":53", true, "A " + upIP, false},
		{"probe dns --tcp --type A allowed.test " + canIP + ":53", true, "A " + upIP, false},
	}
}

// writeProbeScript writes probeScript(probes) into dir as probes.sh, for
// an inner container (a compose service, a build's RUN step) to run.
func writeProbeScript(t *testing.T, dir string, probes []probeCase) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "probes.sh"), []byte(probeScript(probes)), 0o755); err != nil {
		t.Fatal(err)
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
