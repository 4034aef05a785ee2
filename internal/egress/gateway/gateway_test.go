package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"go.uber.org/goleak"

	"vak/internal/egress/admin"
	"vak/internal/egress/ca"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/egresstest"
	"vak/internal/receipts"
)

const secretValue = "gw-real-secret-value-0123456789"

const configTmpl = `
[network]
policy = "proxied"

[[network.rules]]
name = "api"
hosts = ["api.test", "upstream-only.test"]
cidrs = ["127.0.0.2/32"]
ports = [%[1]d]

[network.dns]
upstream = ["%[2]s"]
[network.dns.overrides]
"api.test" = ["127.0.0.2"]

[gateway]
listen = "127.0.0.1:0"
transparent_listen = "127.0.0.1:0"
dns_listen = "127.0.0.1:0"
admin_socket = "%[3]s"
extra_ca_bundles = ["%[4]s"]

[secrets.API_TOKEN]
env = "VAK_TEST_GW_TOKEN"
hosts = ["api.test"]
`

// countingDNS is a real upstream resolver that counts queries.
func countingDNS(t *testing.T) (string, *atomic.Int64) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	started := make(chan struct{})
	srv := &mdns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) }, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		n.Add(1)
		m := new(mdns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		if q.Name == "upstream-only.test." && q.Qtype == mdns.TypeA {
			m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 30}, A: net.ParseIP("127.0.0.2")})
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String(), &n
}

func TestGatewayEndToEnd(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	t.Setenv("VAK_TEST_GW_TOKEN", secretValue)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	upCA := egresstest.NewCA(t)
	release := make(chan struct{})
	up := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.2", 0), upCA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			io.WriteString(w, "first\n")
			http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprintf(w, "auth=%s", r.Header.Get("Authorization"))
	}), "api.test", "upstream-only.test")
	dnsAddr, dnsQueries := countingDNS(t)
	sock := filepath.Join(dir, "gw.sock")
	cfgPath := filepath.Join(dir, "gateway.toml")
	goodCfg := fmt.Sprintf(configTmpl, up.Port(), dnsAddr, sock, upCA.WritePEM(t, dir))
	if err := os.WriteFile(cfgPath, []byte(goodCfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{
		Load:         func() (*egressconfig.Config, error) { return egressconfig.LoadFile(cfgPath) },
		ConfigFile:   cfgPath,
		StateDir:     state,
		Session:      "e2e",
		Logf:         t.Logf,
		HandleSIGHUP: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- g.Run(ctx) }()
	defer func() {
		close(release)
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	addrs := g.Addrs()

	// The CA key stays in the state dir, 0600; only the cert is served.
	if fi, err := os.Stat(filepath.Join(state, "ca", ca.KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key: %v %v", fi, err)
	}
	ac := admin.NewClient(sock)
	pemCert, err := ac.CACert(ctx)
	if err != nil || strings.Contains(string(pemCert), "PRIVATE") {
		t.Fatalf("CA cert: %v", err)
	}
	env, err := ac.Env(ctx)
	if err != nil || !strings.HasPrefix(env["API_TOKEN"], "vakph_") {
		t.Fatalf("env: %v %v", env, err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCert)
	pu, _ := url.Parse("http://" + addrs.Proxy)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	do := func(u string) (int, string) {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+env["API_TOKEN"])
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	apiURL := fmt.Sprintf("https://api.test:%d/x", up.Port())
	status, body := do(apiURL)
	if status != 200 || body != "auth=Bearer "+env["API_TOKEN"] {
		t.Fatalf("request: %d %q (want the echo redacted back to the placeholder)", status, body)
	}

	// DNS: allowed names are answered, denied names never reach upstream.
	q := func(name string) *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion(name, mdns.TypeA)
		r, _, err := (&mdns.Client{Timeout: 5 * time.Second}).Exchange(m, addrs.DNS)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := q("api.test."); len(r.Answer) != 1 {
		t.Fatalf("api.test: %v", r)
	}
	if dnsQueries.Load() != 0 {
		t.Fatal("override went upstream")
	}
	if r := q("upstream-only.test."); len(r.Answer) != 1 || dnsQueries.Load() == 0 {
		t.Fatalf("control query did not go upstream: %v", r)
	}
	before := dnsQueries.Load()
	for i := range 5 {
		// The default block answer is the sinkhole, never an upstream answer.
		r := q(fmt.Sprintf("leak-%d-%d.attacker.test.", i, time.Now().UnixNano()))
		if a, ok := func() (*mdns.A, bool) {
			if len(r.Answer) != 1 {
				return nil, false
			}
			a, ok := r.Answer[0].(*mdns.A)
			return a, ok
		}(); r.Rcode != mdns.RcodeSuccess || !ok || a.A.String() != egressconfig.DefaultSinkhole.String() {
			t.Fatalf("denied name not answered with the sinkhole: %v", r)
		}
	}
	if dnsQueries.Load() != before {
		t.Fatal("denied DNS names reached the upstream resolver")
	}

	// Status.
	raw, err := ac.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := json.Unmarshal(raw, &st); err != nil || st.Session != "e2e" || st.Rules != 1 || st.Secrets[0] != "API_TOKEN" {
		t.Fatalf("status %s %v", raw, err)
	}
	if strings.Contains(string(raw), secretValue) {
		t.Fatal("status leaks the secret")
	}

	// A long-lived stream, then an invalid config: reload fails, the
	// old policy stays.
	resp, err := c.Get(fmt.Sprintf("https://api.test:%d/slow", up.Port()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if l, _ := br.ReadString('\n'); l != "first\n" {
		t.Fatal("slow stream did not start")
	}
	os.WriteFile(cfgPath, []byte(strings.Replace(goodCfg, `hosts = ["api.test", "upstream-only.test"]`, `hosts = ["bad*.test"]`, 1)), 0o600)
	if err := ac.Reload(ctx); err == nil || !strings.Contains(err.Error(), "network.rules[0].hosts[0]") {
		t.Fatalf("invalid reload: %v", err)
	}
	if status, _ := do(apiURL); status != 200 {
		t.Fatalf("after failed reload: %d", status)
	}
	// SIGHUP reload to a policy without api.test: new requests denied, the
	// stream stays up.
	os.WriteFile(cfgPath, []byte(strings.Replace(goodCfg, `"api.test", "upstream-only.test"`, `"upstream-only.test"`, 1)), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for g.Status().(Status).Reloads == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g.Status().(Status).Reloads == 0 {
		t.Fatal("SIGHUP did not reload")
	}
	if status, body := do(apiURL); status == 200 {
		t.Fatalf("api.test still allowed after reload: %s", body)
	}
	// Revoke cuts the stream.
	n, err := ac.Revoke(ctx)
	if err != nil || n == 0 {
		t.Fatalf("revoke: %d %v", n, err)
	}
	if _, err := io.ReadAll(br); err == nil {
		t.Fatal("revoked stream ended cleanly")
	}
	resp.Body.Close()
	tr.CloseIdleConnections()
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	runErr <- nil

	// Receipts verify, and contain no secret or placeholder.
	pub, err := receipts.LoadPublicKey(st.ReceiptsPubKey)
	if err != nil || receipts.KeyID(pub) != st.ReceiptsKey {
		t.Fatalf("receipts public key: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(ReceiptsKeyDir(state), receipts.KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("receipts signing key: %v %v", fi, err)
	}
	rep, err := receipts.VerifyFileSigned(st.ReceiptsFile, pub, false)
	if err != nil || rep.Records < 10 || !rep.Signed {
		t.Fatalf("receipts: %+v %v", rep, err)
	}
	b, _ := os.ReadFile(st.ReceiptsFile)
	if strings.Contains(string(b), secretValue) || strings.Contains(string(b), env["API_TOKEN"]) {
		t.Fatal("receipts contain the secret or its placeholder")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatal("admin socket left behind")
	}
}

func TestGatewayRefusesInvalidConfig(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.toml")
	os.WriteFile(cfgPath, []byte("[[network.rules]]\nhosts = [\"ok.test\"]\n[[network.rules]]\nhosts = [\"a.test\"]\nports = [70000]\n"), 0o600)
	_, err := New(Options{Load: func() (*egressconfig.Config, error) { return egressconfig.LoadFile(cfgPath) }, StateDir: filepath.Join(dir, "s")})
	if err == nil || !strings.Contains(err.Error(), cfgPath+": network.rules[1].ports[0]") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "s", "gateway.sock")); !os.IsNotExist(err) {
		t.Fatal("a refused gateway left a socket")
	}
}

// TestGatewayRefusesShortSecret: a secret too short to redact safely is
// refused at start with the file and key path, like every config error,
// and without the value.
func TestGatewayRefusesShortSecret(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.toml")
	for _, tc := range []struct{ doc, key string }{
		{"[secrets.TOK]\nvalue = \"short7x\"\nhosts = [\"a.test\"]\n", "secrets.TOK.value"},
		{"[secrets.TOK]\nenv = \"VAK_TEST_SHORT\"\nhosts = [\"a.test\"]\n", "secrets.TOK.env"},
	} {
		t.Setenv("VAK_TEST_SHORT", "tiny123")
		os.WriteFile(cfgPath, []byte(tc.doc), 0o600)
		_, err := New(Options{Load: func() (*egressconfig.Config, error) { return egressconfig.LoadFile(cfgPath) }, StateDir: filepath.Join(dir, "s"), AdminSocket: "-", Listen: "-"})
		if err == nil || !strings.Contains(err.Error(), cfgPath+": "+tc.key+": value is 7 bytes") {
			t.Fatalf("err = %v, want %s: %s", err, cfgPath, tc.key)
		}
		if strings.Contains(err.Error(), "short7x") || strings.Contains(err.Error(), "tiny123") {
			t.Fatalf("error reveals the value: %v", err)
		}
	}
}
