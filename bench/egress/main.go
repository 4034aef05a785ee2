// Command egress benchmarks the vak gateway against mitmproxy side by side,
// in one run, on the same machine and the same upstream:
//
//   - keep-alive HTTPS GETs through each proxy at concurrency 1 and 32, with
//     the equivalent policy in both (one allow rule, one header secret
//     substitution): requests/s, added median and p99 latency over a direct
//     connection, and each proxy's peak RSS;
//   - a 1 GiB streamed upload through each proxy: throughput and RSS growth.
//
// Beside them run three floors, each a bare relay in a process of its own
// (relay.go): the floor relay (the least a TLS-intercepting Go proxy does),
// the same keeping vak's records, and the same making vak's per-request
// checks too, with vak's own policy and secrets packages (checks.go). The
// bench prints vak against each and what the records and the checks cost
// the floor.
//
// Reproduce (from the repository root; needs Debian's mitmproxy package):
//
//	apt-get install -y mitmproxy
//	go build -o /tmp/vak ./cmd/vak
//	go run ./bench/egress -vak /tmp/vak -duration 10s
//
// The upstream server and the load generator run in this process; each
// proxy runs as its own process so its RSS can be read from /proc.
package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

//go:embed mitm_equiv_addon.py
var addonPy []byte

const (
	benchHost   = "bench.test"
	secretValue = "bench-real-secret-0123456789abcdef"
	bodySize    = 128
)

func main() {
	vakBin := flag.String("vak", "", "path to the vak binary (go build -o /tmp/vak ./cmd/vak)")
	vakBase := flag.String("vak-base", "", "optional second vak binary (e.g. built from main) run interleaved as \"vak-base\" for a before/after comparison in one run")
	mitmBin := flag.String("mitmdump", "mitmdump", "path to mitmdump")
	dur := flag.Duration("duration", 10*time.Second, "measurement time per scenario")
	warm := flag.Duration("warmup", 2*time.Second, "warm-up time per scenario")
	uploadSize := flag.Int64("upload", 1<<30, "upload size in bytes")
	skipMitm := flag.Bool("skip-mitmproxy", false, "benchmark vak only")
	rounds := flag.Int("rounds", 5, "interleaved rounds per concurrency (duration is split across them)")
	mitmDefaultUpload := flag.Bool("mitm-default-upload", false, "also upload through mitmproxy with its default settings (buffers the whole body; very slow)")
	flag.Var(&vakEnv, "vak-env", "extra NAME=value for the vak process (repeatable; e.g. GOMAXPROCS=1)")
	concList := flag.String("conc", "1,32", "comma-separated client concurrencies")
	relayServe := flag.String("relay-serve", "", "serve the floor relay on this address (internal)")
	skipRelay := flag.Bool("skip-relay", false, "leave out the floor relays (bare, with records, with records and checks)")
	flag.Parse()
	if *relayServe != "" {
		serveRelay(*relayServe)
		return
	}
	var concs []int
	for _, f := range strings.Split(*concList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("-conc: bad concurrency %q", f)
		}
		concs = append(concs, n)
	}
	if *vakBin == "" {
		log.Fatal("-vak is required")
	}
	dir, err := os.MkdirTemp("", "vak-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	caCert, caKey := newCA()
	caPEM := filepath.Join(dir, "upstream-ca.pem")
	os.WriteFile(caPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}), 0o644)
	upCert := leaf(caCert, caKey, benchHost)
	up, upPort := startUpstream(upCert)
	defer up.Close()
	upPool := x509.NewCertPool()
	upPool.AddCert(caCert)

	fmt.Printf("# egress benchmark: %s, %d CPUs, %s, duration %v per scenario\n\n", runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), runtime.Version(), *dur)

	// Direct baseline.
	direct := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: upPool},
		DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, n, "127.0.0.1:"+strconv.Itoa(upPort))
		},
		MaxIdleConnsPerHost: 64,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	target := fmt.Sprintf("https://%s:%d/", benchHost, upPort)

	// Contenders run side by side, interleaved in rounds, so machine noise
	// (this box is shared) hits all of them alike.
	vak := startVak(*vakBin, dir, upPort, caPEM)
	type contender struct {
		name string
		tr   *http.Transport
		auth string
		pid  int // the proxy process (0: none)
	}
	cs := []contender{{"direct", direct, "Bearer " + secretValue, 0}, {"vak", vak.transport(), "Bearer " + vak.placeholder, vak.cmd.Process.Pid}}
	var base *proxyProc
	if *vakBase != "" {
		baseDir := filepath.Join(dir, "base")
		if err := os.Mkdir(baseDir, 0o700); err != nil {
			log.Fatal(err)
		}
		base = startVak(*vakBase, baseDir, upPort, caPEM)
		cs = append(cs, contender{"vak-base", base.transport(), "Bearer " + base.placeholder, base.cmd.Process.Pid})
	}
	var relays []*proxyProc
	if !*skipRelay {
		for _, f := range []struct {
			name string
			kind relayFloor
		}{{"floor relay", floorPlain}, {"floor relay + records", floorRecords}, {"floor relay + records + checks", floorChecks}} {
			r := startRelay(dir, upPort, upCert, caPEM, upPool, f.kind)
			relays = append(relays, r)
			cs = append(cs, contender{f.name, r.transport(), "Bearer " + r.placeholder, r.cmd.Process.Pid})
		}
	}
	var mitm *proxyProc
	if !*skipMitm {
		mitm = startMitm(*mitmBin, dir, upPort, caPEM, "")
		cs = append(cs, contender{"mitmproxy", mitm.transport(), "Bearer " + mitm.placeholder, mitm.cmd.Process.Pid})
	}
	results := map[string]map[int]stats{}
	for _, c := range concs {
		acc := map[string]*stats{}
		for _, ct := range cs {
			load(ct.tr, target, ct.auth, c, *warm, 0, nil) // warm-up
			acc[ct.name] = &stats{}
		}
		for range *rounds {
			for _, ct := range cs {
				cpu0 := procCPU(ct.pid)
				load(ct.tr, target, ct.auth, c, 0, *dur/time.Duration(*rounds), acc[ct.name])
				acc[ct.name].raw.cpu += procCPU(ct.pid) - cpu0
			}
		}
		for _, ct := range cs {
			if results[ct.name] == nil {
				results[ct.name] = map[int]stats{}
			}
			results[ct.name][c] = acc[ct.name].finish(*dur)
		}
	}
	direct.CloseIdleConnections()
	vakPeak := peakRSS(vak.cmd.Process.Pid)
	vak.stop()
	if base != nil {
		base.stop()
	}
	for _, r := range relays {
		r.stop()
	}
	var mitmPeak int64
	if mitm != nil {
		mitmPeak = peakRSS(mitm.cmd.Process.Pid)
		mitm.stop()
	}

	// Uploads, each through a fresh proxy process.
	v2 := startVak(*vakBin, dir, upPort, caPEM)
	vakUp := upload(v2, target, *uploadSize)
	v2.stop()
	var mitmUp, mitmBufUp uploadResult
	if !*skipMitm {
		m2 := startMitm(*mitmBin, dir, upPort, caPEM, "1m")
		mitmUp = upload(m2, target, *uploadSize)
		m2.stop()
		if *mitmDefaultUpload {
			m3 := startMitm(*mitmBin, dir, upPort, caPEM, "")
			mitmBufUp = upload(m3, target, *uploadSize)
			m3.stop()
		}
	}

	// Report.
	fmt.Println("## Keep-alive HTTPS GET (" + strconv.Itoa(bodySize) + "-byte responses, HTTP/1.1 client legs)")
	fmt.Println()
	fmt.Println("| path | conc | req/s | median | p99 | added median | added p99 | proxy CPU/req | errors |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, name := range []string{"direct", "vak", "vak-base", "floor relay", "floor relay + records", "floor relay + records + checks", "mitmproxy"} {
		for _, c := range concs {
			s, ok := results[name][c]
			if !ok {
				continue
			}
			d := results["direct"][c]
			added := func(a, b time.Duration) string {
				if name == "direct" {
					return "-"
				}
				return ms(a - b)
			}
			cpu := "-"
			if name != "direct" {
				cpu = fmt.Sprintf("%.0f µs", float64(s.cpuPerReq)/float64(time.Microsecond))
			}
			fmt.Printf("| %s | %d | %.0f | %s | %s | %s | %s | %s | %d |\n", name, c, s.rps, ms(s.p50), ms(s.p99), added(s.p50, d.p50), added(s.p99, d.p99), cpu, s.errors)
		}
	}
	fmt.Println()
	if b, ok := results["vak-base"]; ok {
		for _, c := range concs {
			fmt.Printf("- vak vs vak-base at concurrency %d: throughput %.2f×, added median %s vs %s\n", c, results["vak"][c].rps/b[c].rps, ms(results["vak"][c].p50-results["direct"][c].p50), ms(b[c].p50-results["direct"][c].p50))
		}
	}
	for _, floor := range []string{"floor relay", "floor relay + records", "floor relay + records + checks"} {
		f, ok := results[floor]
		if !ok {
			continue
		}
		for _, c := range concs {
			fmt.Printf("- vak vs the %s at concurrency %d: throughput %.2f×, added median %s vs %s\n", floor, c, results["vak"][c].rps/f[c].rps, ms(results["vak"][c].p50-results["direct"][c].p50), ms(f[c].p50-results["direct"][c].p50))
		}
	}
	if f, ok := results["floor relay"]; ok {
		for _, c := range concs {
			fmt.Printf("- what the records alone cost the floor at concurrency %d: throughput %.2f× the floor relay's\n", c, results["floor relay + records"][c].rps/f[c].rps)
			fmt.Printf("- what the records and the design's checks cost the floor at concurrency %d: throughput %.2f× the floor relay's\n", c, results["floor relay + records + checks"][c].rps/f[c].rps)
		}
	}
	if m, ok := results["mitmproxy"]; ok {
		for _, c := range concs {
			fmt.Printf("- throughput ratio vak/mitmproxy at concurrency %d: **%.1f×**\n", c, results["vak"][c].rps/m[c].rps)
		}
		fmt.Printf("- peak RSS over the GET runs: vak %s, mitmproxy %s\n", mib(vakPeak), mib(mitmPeak))
	} else {
		fmt.Printf("- peak RSS over the GET runs: vak %s\n", mib(vakPeak))
	}
	fmt.Println()
	fmt.Printf("## %s streamed upload (one POST, Content-Length known)\n\n", mib(*uploadSize))
	fmt.Println("| proxy | time | MiB/s | RSS before | peak RSS after | growth | upstream got |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	row := func(name string, u uploadResult) {
		fmt.Printf("| %s | %.1fs | %.0f | %s | %s | %s | %s%s |\n", name, u.dur.Seconds(), float64(u.bytes)/(1<<20)/u.dur.Seconds(), mib(u.rssBefore), mib(u.hwmAfter), mib(u.hwmAfter-u.rssBefore), mib(u.bytes), errNote(u.err))
	}
	row("vak", vakUp)
	if mitm != nil {
		row("mitmproxy (stream_large_bodies=1m)", mitmUp)
		if *mitmDefaultUpload {
			row("mitmproxy (default: buffers bodies)", mitmBufUp)
		}
	}
}

func errNote(err error) string {
	if err == nil {
		return ""
	}
	return " (error: " + err.Error() + ")"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
func mib(n int64) string        { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

type envList []string

func (e *envList) String() string     { return strings.Join(*e, " ") }
func (e *envList) Set(v string) error { *e = append(*e, v); return nil }

var vakEnv envList

// ---- upstream ----

var uploadBytes atomic.Int64

func startUpstream(cert tls.Certificate) (*http.Server, int) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), bodySize)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == "POST" {
				n, _ := io.Copy(io.Discard, r.Body)
				uploadBytes.Store(n)
				w.WriteHeader(204)
				return
			}
			if r.Header.Get("Authorization") != "Bearer "+secretValue {
				http.Error(w, "bad credentials", http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(bodySize))
			w.Write(body)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
	}
	go srv.Serve(tls.NewListener(l, srv.TLSConfig))
	return srv, l.Addr().(*net.TCPAddr).Port
}

func newCA() (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func leaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		log.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Raw}, PrivateKey: key}
}

// ---- proxies ----

type proxyProc struct {
	cmd         *exec.Cmd
	addr        string
	caPool      *x509.CertPool
	placeholder string
	tr          *http.Transport
}

func (p *proxyProc) transport() *http.Transport {
	if p.tr == nil {
		pu, _ := url.Parse("http://" + p.addr)
		p.tr = &http.Transport{
			Proxy:               http.ProxyURL(pu),
			TLSClientConfig:     &tls.Config{RootCAs: p.caPool},
			MaxIdleConnsPerHost: 64,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		}
	}
	return p.tr
}

func (p *proxyProc) stop() {
	if p.tr != nil {
		p.tr.CloseIdleConnections()
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitPort(addr string) {
	for range 300 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Fatalf("nothing listens on %s", addr)
}

func startVak(bin, dir string, upPort int, caPEM string) *proxyProc {
	state := filepath.Join(dir, "vak-state")
	port := freePort()
	cfg := fmt.Sprintf(`
[network]
policy = "proxied"

[[network.rules]]
name = "bench"
hosts = [%q]
cidrs = ["127.0.0.1/32"]
methods = ["GET", "POST"]
ports = [%d]

[network.dns.overrides]
%q = ["127.0.0.1"]

[gateway]
extra_ca_bundles = [%q]

[secrets.BENCH_TOKEN]
value = %q
hosts = [%q]
`, benchHost, upPort, benchHost, caPEM, secretValue, benchHost)
	cfgPath := filepath.Join(dir, "vak-gateway.toml")
	os.WriteFile(cfgPath, []byte(cfg), 0o600)
	sock := filepath.Join(dir, "vak.sock")
	cmd := exec.Command(bin, "gateway", "--gateway-config", cfgPath, "--listen", "127.0.0.1:"+strconv.Itoa(port), "--socket", sock, "--session", "bench")
	cmd.Env = append(append(os.Environ(), "XDG_STATE_HOME="+state), vakEnv...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	waitPort("127.0.0.1:" + strconv.Itoa(port))
	envOut, err := exec.Command(bin, "gateway", "env", "--socket", sock).Output()
	if err != nil {
		log.Fatalf("vak gateway env: %v", err)
	}
	ph := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(envOut)), "BENCH_TOKEN="))
	cmd2 := exec.Command(bin, "gateway", "ca")
	cmd2.Env = cmd.Env
	caOut, err := cmd2.Output()
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caOut)
	return &proxyProc{cmd: cmd, addr: "127.0.0.1:" + strconv.Itoa(port), caPool: pool, placeholder: ph}
}

func startMitm(bin, dir string, upPort int, caPEM, stream string) *proxyProc {
	conf := filepath.Join(dir, "mitm-conf")
	os.MkdirAll(conf, 0o700)
	addon := filepath.Join(dir, "mitm_equiv_addon.py")
	os.WriteFile(addon, addonPy, 0o644)
	port := freePort()
	placeholder := "SANDCAT_PLACEHOLDER_BENCH_TOKEN"
	args := []string{"-q", "--listen-host", "127.0.0.1", "-p", strconv.Itoa(port),
		"--set", "confdir=" + conf, "--set", "ssl_verify_upstream_trusted_ca=" + caPEM, "-s", addon}
	if stream != "" {
		args = append(args, "--set", "stream_large_bodies="+stream)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "BENCH_HOST="+benchHost, "BENCH_PLACEHOLDER="+placeholder, "BENCH_VALUE="+secretValue)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatalf("start mitmdump: %v", err)
	}
	waitPort("127.0.0.1:" + strconv.Itoa(port))
	caFile := filepath.Join(conf, "mitmproxy-ca-cert.pem")
	var caB []byte
	for range 100 {
		if b, err := os.ReadFile(caFile); err == nil && len(b) > 0 {
			caB = b
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caB) {
		log.Fatalf("no mitmproxy CA in %s", caFile)
	}
	return &proxyProc{cmd: cmd, addr: "127.0.0.1:" + strconv.Itoa(port), caPool: pool, placeholder: placeholder}
}

// ---- measurement ----

type stats struct {
	rps      float64
	p50, p99 time.Duration
	errors   int64
	// cpuPerReq is the proxy process's CPU time (user + system) per
	// request: less sensitive to a busy machine than latency.
	cpuPerReq time.Duration
	raw       acc
}

type acc struct {
	lat    []time.Duration
	errors int64
	cpu    time.Duration
}

func (a *stats) finish(total time.Duration) stats {
	lat := a.raw.lat
	slices.Sort(lat)
	s := stats{rps: float64(len(lat)) / total.Seconds(), errors: a.raw.errors}
	if len(lat) > 0 {
		s.p50 = lat[len(lat)/2]
		s.p99 = lat[len(lat)*99/100]
		s.cpuPerReq = a.raw.cpu / time.Duration(len(lat))
	}
	return s
}

// load runs conc keep-alive clients for warm (discarded) then dur, adding
// latencies and errors to into (nil: discard).
func load(tr *http.Transport, target, auth string, conc int, warm, dur time.Duration, into *stats) {
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, conc)
	run := func(d time.Duration, record bool) {
		if d <= 0 {
			return
		}
		var mu sync.Mutex
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lat := make([]time.Duration, 0, 1<<14)
				var errs int64
				for time.Now().Before(deadline) {
					req, _ := http.NewRequest("GET", target, nil)
					req.Header.Set("Authorization", auth)
					t0 := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						errs++
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						errs++
						continue
					}
					lat = append(lat, time.Since(t0))
				}
				if record {
					mu.Lock()
					into.raw.lat = append(into.raw.lat, lat...)
					into.raw.errors += errs
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	run(warm, false)
	run(dur, into != nil)
}

type uploadResult struct {
	dur                 time.Duration
	bytes               int64
	rssBefore, hwmAfter int64
	err                 error
}

// patternReader yields n bytes of a repeating pseudo-random pattern.
type patternReader struct {
	pat []byte
	off int
	n   int64
}

func (r *patternReader) Read(b []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > r.n {
		b = b[:r.n]
	}
	total := 0
	for total < len(b) {
		c := copy(b[total:], r.pat[r.off:])
		total += c
		r.off = (r.off + c) % len(r.pat)
	}
	r.n -= int64(total)
	return total, nil
}

func upload(p *proxyProc, target string, size int64) uploadResult {
	client := &http.Client{Transport: p.transport(), Timeout: 10 * time.Minute}
	// One small request first so the connection and TLS state exist.
	if req, _ := http.NewRequest("GET", target, nil); req != nil {
		req.Header.Set("Authorization", "Bearer "+p.placeholder)
		if resp, err := client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	pat := make([]byte, 64<<10)
	rand.Read(pat)
	res := uploadResult{rssBefore: currentRSS(p.cmd.Process.Pid)}
	uploadBytes.Store(0)
	req, _ := http.NewRequest("POST", target, &patternReader{pat: pat, n: size})
	req.ContentLength = size
	t0 := time.Now()
	resp, err := client.Do(req)
	res.dur = time.Since(t0)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 204 {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
	}
	res.err = err
	res.bytes = uploadBytes.Load()
	res.hwmAfter = peakRSS(p.cmd.Process.Pid)
	return res
}

func procStatus(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

func peakRSS(pid int) int64 { return procStatus(pid, "VmHWM") }

// procCPU is pid's user + system CPU time so far (0 for pid 0 or when
// unreadable), from /proc/PID/stat in clock ticks (USER_HZ, 100 on Linux).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start at ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100)
}
func currentRSS(pid int) int64 { return procStatus(pid, "VmRSS") }
