// Command proxied measures HTTPS from a sandboxed container through the
// proxied topology (netclient → gateway, TLS intercepted and re-originated)
// against the same image on a plain bridge talking to the upstream directly.
// Both run `probe bench` (keep-alive GETs, verification on) inside their
// container; rounds are interleaved.
//
//	go run ./bench/proxied -n 2000 -rounds 5
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"vak/bench/internal/stats"
	"vak/internal/config"
	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/proxynet"
)

const image = "vak-test:latest"

var label = []string{"--label", "vak.bench=1"}

func main() {
	n := flag.Int("n", 2000, "requests per round")
	rounds := flag.Int("rounds", 5, "interleaved rounds per contender and concurrency")
	size := flag.Int("size", 1024, "response body bytes")
	flag.Parse()
	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	var cleanup []func()
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
	}()
	fail := func(err error) {
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
		log.Fatal(err)
	}
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	base, _ := os.MkdirTemp(tmp, "vak-bench-proxied-")
	cleanup = append(cleanup, func() { os.RemoveAll(base) })
	certs := filepath.Join(base, "certs")
	os.MkdirAll(certs, 0o755)
	must(dockerRun(append(append([]string{"run", "--rm"}, label...), "-v", certs+":/out", image, "testnet", "gencert", "--ca-out", "/out", "--names", "allowed.test")...))
	inet := "vakbench-inet"
	exec.Command("docker", "network", "rm", inet).Run()
	must(dockerRun(append(append([]string{"network", "create"}, label...), inet)...))
	cleanup = append(cleanup, func() { exec.Command("docker", "network", "rm", inet).Run() })
	up := must(dockerRun(append(append([]string{"run", "-d"}, label...), "--network", inet, "-v", certs+":/certs:ro", image, "testnet", "upstream", "--cert", "/certs/cert.pem", "--key", "/certs/key.pem")...))
	cleanup = append(cleanup, func() { exec.Command("docker", "rm", "-f", up).Run() })
	upIP := must(dockerRun("inspect", "-f", `{{(index .NetworkSettings.Networks "`+inet+`").IPAddress}}`, up))

	ws, _ := paths.CanonicalWorkspace(mkdir(filepath.Join(base, "ws")))
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nname = \"upstream\"\naction = \"allow\"\nhosts = [\"allowed.test\"]\ncidrs = [\"%s/32\"]\n[network.dns.overrides]\n\"allowed.test\" = [%q]\n[gateway]\nextra_ca_bundles = [%q]\n", upIP, upIP, filepath.Join(certs, "ca.pem"))), 0o600)
	eng, err := engine.New()
	if err != nil {
		fail(err)
	}
	state := mkdir(filepath.Join(base, "state"))
	vcfg, err := config.Load(config.Options{UserFile: cfg})
	if err != nil {
		fail(err)
	}
	net, err := proxynet.Ensure(context.Background(), proxynet.Options{Engine: eng, Workspace: ws, Binary: vak, Sections: vcfg.EgressSections, ConfigFile: cfg, StateDir: state, Labels: map[string]string{"vak.bench": "1"}, Progress: os.Stderr})
	if err != nil {
		fail(err)
	}
	cleanup = append(cleanup, func() { proxynet.Teardown(context.Background(), eng, state, ws, true) })
	must(dockerRun("network", "connect", inet, net.Gateway))

	direct := must(dockerRun(append(append([]string{"run", "-d"}, label...), "--network", inet, "--add-host", "allowed.test:"+upIP, "-v", certs+":/certs:ro", "-e", "SSL_CERT_FILE=/certs/ca.pem", image, "sleep", "3600")...))
	cleanup = append(cleanup, func() { exec.Command("docker", "rm", "-f", direct).Run() })
	att := net.Attachment()
	args := append(append([]string{"run", "-d"}, label...), "--network", att.Mode, "--cap-drop", "ALL", "-v", att.Binds[0])
	for _, e := range att.Env {
		args = append(args, "-e", e)
	}
	for k, v := range att.Labels {
		args = append(args, "--label", k+"="+v)
	}
	sandboxed := must(dockerRun(append(args, image, "sleep", "3600")...))
	cleanup = append(cleanup, func() { exec.Command("docker", "rm", "-f", sandboxed).Run() })

	url := fmt.Sprintf("https://allowed.test/bytes/%d", *size)
	fmt.Printf("### proxied topology vs direct bridge (%s/%s, %d cores; %d keep-alive HTTPS GETs of %d B per round, %d rounds, interleaved)\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), *n, *size, *rounds)
	fmt.Println("| concurrency | contender | median latency (median of rounds) | p99 | requests/s | added median |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, conc := range []int{1, 8} {
		var d, p []bench
		for r := 0; r < *rounds; r++ {
			d = append(d, run(direct, url, *n, conc))
			p = append(p, run(sandboxed, url, *n, conc))
		}
		dm, pm := median(d), median(p)
		fmt.Printf("| %d | direct (plain bridge) | %.3f ms | %.3f ms | %.0f | |\n", conc, dm.MedianMS, dm.P99MS, dm.RPS)
		fmt.Printf("| %d | through vak (proxied) | %.3f ms | %.3f ms | %.0f | %+.3f ms (%.2f× throughput) |\n", conc, pm.MedianMS, pm.P99MS, pm.RPS, pm.MedianMS-dm.MedianMS, pm.RPS/dm.RPS)
	}
}

type bench struct {
	MedianMS float64 `json:"median_ms"`
	P99MS    float64 `json:"p99_ms"`
	RPS      float64 `json:"rps"`
	Errors   int     `json:"errors"`
	Proto    string  `json:"proto"`
}

func run(container, url string, n, conc int) bench {
	out := must(dockerRun("exec", container, "probe", "bench", url, fmt.Sprint(n), fmt.Sprint(conc)))
	js := strings.TrimPrefix(out, "OK ")
	var b bench
	if err := json.Unmarshal([]byte(js), &b); err != nil || b.Errors > 0 {
		log.Fatalf("bench in %s: %v: %s", container[:12], err, out)
	}
	return b
}

// median picks the round with the median latency.
func median(bs []bench) bench {
	s := slices.Clone(bs)
	slices.SortFunc(s, func(a, b bench) int {
		switch {
		case a.MedianMS < b.MedianMS:
			return -1
		case a.MedianMS > b.MedianMS:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

func dockerRun(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func must(s string, err error) string {
	if err != nil {
		log.Fatal(err)
	}
	return s
}

func mkdir(p string) string {
	os.MkdirAll(p, 0o755)
	return p
}
