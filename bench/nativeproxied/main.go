// Command nativeproxied measures the landlock backend's proxied network
// (the fenced namespace and the user's on-demand gateway), interleaved:
//
//   - keep-alive HTTPS: `probe bench` inside `vak run --network proxied`
//     (redirect, forwarder, unix socket, gateway, TLS intercepted and
//     re-originated) vs the same keep-alive GETs from the host straight to
//     the gateway's data socket (a PROXY v2 header, then the same TLS);
//     the difference is the fence;
//
//   - cold start: `vak run --network proxied -- true` (gateway already
//     running) vs `vak run -- true`; plus the first run, which starts the
//     gateway.
//
//     go run ./bench/nativeproxied -n 2000 -rounds 5 -cold 30
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"vak/bench/internal/stats"
	"vak/internal/egress/admin"
	"vak/internal/egress/ondemand"
	"vak/internal/egress/proxyproto"
	"vak/internal/testenv/testnet"
)

func main() {
	n := flag.Int("n", 2000, "requests per round")
	rounds := flag.Int("rounds", 5, "interleaved rounds")
	cold := flag.Int("cold", 30, "cold runs per contender")
	size := flag.Int("size", 1024, "response body bytes")
	flag.Parse()
	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	base, err := os.MkdirTemp(tmp, "vak-bench-nativeproxied-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	ws := filepath.Join(base, "ws")
	os.MkdirAll(ws, 0o755)
	probe := filepath.Join(ws, "probe")
	if out, err := exec.Command("go", "build", "-o", probe, "vak/scripts/probe").CombinedOutput(); err != nil {
		log.Fatalf("build probe: %v: %s", err, out)
	}
	xdg := filepath.Join(base, "state")
	os.Setenv("XDG_STATE_HOME", xdg)
	state := filepath.Join(xdg, "vak")
	defer ondemand.Stop(context.Background(), state)

	// The upstream: TLS on 127.0.0.2 with a CA only the gateway trusts.
	caPEM, cert := testCA("bench.test")
	caFile := filepath.Join(base, "ca.pem")
	os.WriteFile(caFile, caPEM, 0o644)
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		log.Fatal(err)
	}
	body := strings.Repeat("x", *size)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(l, "", "")
	defer srv.Close()
	port := l.Addr().(*net.TCPAddr).Port
	url := fmt.Sprintf("https://bench.test:%d/", port)
	cfg := filepath.Join(base, "config.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`version = 1
[network]
policy = "proxied"
[[network.rules]]
hosts = ["bench.test"]
cidrs = ["127.0.0.2/32"]
[network.dns.overrides]
"bench.test" = ["127.0.0.2"]
[gateway]
extra_ca_bundles = [%q]
`, caFile)), 0o600)
	run := func(args ...string) (string, error) {
		cmd := exec.Command(vak, append([]string{"--config", cfg, "run", "-w", ws}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	first, err := stats.Time(func() error { _, err := run("--network", "proxied", "--", "true"); return err })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("# native proxied: %s/%s, %d CPUs, body %d bytes\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), *size)
	fmt.Printf("first `vak run --network proxied -- true` (starts the on-demand gateway): %s\n\n", stats.Ms(first))

	// The host side straight to the gateway: its data socket, a PROXY v2
	// header naming the upstream, then TLS with the vak CA.
	p := ondemand.Layout(state)
	vakCA, err := admin.NewClient(p.Admin).CACert(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(vakCA)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(port))
	tr := &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", p.Data)
			if err != nil {
				return nil, err
			}
			hdr, _ := proxyproto.Append(nil, netip.MustParseAddrPort("127.0.0.1:40000"), dst)
			if _, err := c.Write(hdr); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func() (time.Duration, error) {
		t := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return time.Since(t), nil
	}
	host := &stats.Sample{Name: "host -> gateway socket"}
	fence := &stats.Sample{Name: "sandbox (fence) -> gateway"}
	var fenceMedians []float64
	for r := 0; r < *rounds; r++ {
		if _, err := get(); err != nil { // warm-up
			log.Fatal(err)
		}
		for i := 0; i < *n; i++ {
			d, err := get()
			if err != nil {
				log.Fatal(err)
			}
			host.Add(d)
		}
		out, err := run("--network", "proxied", "--", "./probe", "bench", url, fmt.Sprint(*n), "1")
		if err != nil {
			log.Fatalf("probe bench: %v: %s", err, out)
		}
		var b testnet.Bench
		line := out[strings.Index(out, "OK ")+3:]
		if err := json.Unmarshal([]byte(strings.TrimSpace(strings.SplitN(line, "\n", 2)[0])), &b); err != nil {
			log.Fatalf("probe bench output %q: %v", out, err)
		}
		fenceMedians = append(fenceMedians, b.MedianMS)
		fence.Add(time.Duration(b.MedianMS * float64(time.Millisecond)))
	}
	hostRounds := &stats.Sample{Name: host.Name}
	for r := 0; r < *rounds; r++ {
		s := &stats.Sample{D: host.D[r**n : (r+1)**n]}
		hostRounds.Add(s.Median())
	}
	fmt.Printf("keep-alive HTTPS GET, concurrency 1, %d requests x %d rounds (per-round medians; %s)\n\n", *n, *rounds, "probe bench inside the sandbox, the same Go client settings on the host")
	fmt.Print(stats.Table(hostRounds, fence))
	fmt.Printf("\nfence per-round medians (ms): %v\n\n", fenceMedians)

	plain := &stats.Sample{Name: "vak run -- true"}
	proxied := &stats.Sample{Name: "vak run --network proxied -- true"}
	for i := 0; i < *cold; i++ {
		for _, c := range []struct {
			s    *stats.Sample
			args []string
		}{{plain, []string{"--", "true"}}, {proxied, []string{"--network", "proxied", "--", "true"}}} {
			d, err := stats.Time(func() error { _, err := run(c.args...); return err })
			if err != nil {
				log.Fatal(err)
			}
			c.s.Add(d)
		}
	}
	fmt.Printf("cold runs, interleaved, gateway already running (%d each)\n\n", *cold)
	fmt.Print(stats.Table(plain, proxied))
}

// testCA returns a CA certificate (PEM) and a leaf for name signed by it.
func testCA(name string) ([]byte, tls.Certificate) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vak bench CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	lkey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	lder, err := x509.CreateCertificate(rand.Reader, leaf, ca, &lkey.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		tls.Certificate{Certificate: [][]byte{lder, der}, PrivateKey: lkey}
}
