package cli

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Budgets for what package initialisers allocate in the vak binary. Every
// vak process pays all of them, and a native `vak run` is three processes
// (the command line and two sandbox stages), so an initialiser that
// builds large tables or compiles many regular expressions (the moby
// client's image-reference parser did: 414 KB before third_party/ made
// it lazy) is start-up time of every sandboxed command. Allocations are
// deterministic for a given binary, unlike times.
//
// The total was 512 KB (vak itself allocated 265 KB) until the kubernetes
// session backend linked client-go: its REST client, kubeconfig loading
// and exec streams, with the core, networking and node API types, add
// about 510 KB that no package-level change of vak's can defer (the typed
// clientset, whose scheme alone added 670 KB, is not used:
// internal/kubesession/api.go). The budget holds that and no more.
const (
	initBytesPerPackage = 128 << 10
	initBytesTotal      = 800 << 10
)

// TestInitAllocations checks the initialisers of every package linked into
// vak against the budgets above (GODEBUG=inittrace=1 reports each).
func TestInitAllocations(t *testing.T) {
	cmd := exec.Command(workerExecutable, "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("vak version: %v\n%s", err, stderr.String())
	}
	inits := parseInitTrace(stderr.String())
	// Control: the trace was printed and parsed (vak links well over a
	// hundred packages), so the budgets below cannot pass vacuously.
	if len(inits) < 50 {
		t.Fatalf("control: only %d package initialisers parsed from:\n%s", len(inits), stderr.String())
	}
	total := 0
	for pkg, bytes := range inits {
		total += bytes
		if bytes > initBytesPerPackage {
			t.Errorf("package %s allocates %d bytes when vak starts (budget %d): make what it builds lazy (sync.OnceValue), or keep it out of the binary", pkg, bytes, initBytesPerPackage)
		}
	}
	if total > initBytesTotal {
		t.Errorf("package initialisers allocate %d bytes in all when vak starts (budget %d)", total, initBytesTotal)
	}
}

// parseInitTrace reads GODEBUG=inittrace=1 lines ("init PKG @0.5 ms, 0.1
// ms clock, 1024 bytes, 8 allocs") into bytes allocated per package.
func parseInitTrace(s string) map[string]int {
	out := map[string]int{}
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) < 11 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		n, err := strconv.Atoi(f[7])
		if err != nil {
			continue
		}
		out[f[1]] += n
	}
	return out
}

func TestParseInitTrace(t *testing.T) {
	got := parseInitTrace("init internal/bytealg @0.004 ms, 0 ms clock, 0 bytes, 0 allocs\n" +
		"init github.com/distribution/reference @10 ms, 1.4 ms clock, 414552 bytes, 3600 allocs\n" +
		"vak 1.0\ninit broken line\n")
	if len(got) != 2 || got["github.com/distribution/reference"] != 414552 || got["internal/bytealg"] != 0 {
		t.Fatalf("parseInitTrace: %v", got)
	}
}
