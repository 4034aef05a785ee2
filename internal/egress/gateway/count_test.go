package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"go.uber.org/goleak"

	"vak/internal/egress/admin"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/egresstest"
	"vak/internal/egress/proxyproto"
	"vak/internal/receipts"
)

const countConfig = `
[network]
policy = "proxied"

[[network.rules]]
name = "api"
hosts = ["api.test"]
cidrs = ["127.0.0.2/32"]
methods = ["GET"]
ports = [%[1]d]

[network.dns.overrides]
"api.test" = ["127.0.0.2"]

[gateway]
listen = "127.0.0.1:0"
transparent_listen = "127.0.0.1:0"
dns_listen = "127.0.0.1:0"
admin_socket = "%[2]s"
extra_ca_bundles = ["%[3]s"]

[secrets.API_TOKEN]
value = "count-secret-value-0123456789"
hosts = ["api.test"]
`

// TestEveryResponseHasOneReceipt drives the explicit, transparent and DNS
// listeners through allowed, denied, malformed and server-answered cases
// (OPTIONS *, net/http's own 400s, a DNS query with two questions, a
// truncated one), counts every answer the clients get (an HTTP response, a
// DNS reply, or a refusal by closing the connection), and checks that the
// receipts log holds exactly that many records.
func TestEveryResponseHasOneReceipt(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	dir := t.TempDir()
	upCA := egresstest.NewCA(t)
	up := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.2", 0), upCA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), "api.test")
	sock := filepath.Join(dir, "gw.sock")
	cfgPath := filepath.Join(dir, "gateway.toml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(countConfig, up.Port(), sock, upCA.WritePEM(t, dir))), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{
		Load:     func() (*egressconfig.Config, error) { return egressconfig.LoadFile(cfgPath) },
		StateDir: filepath.Join(dir, "state"),
		Session:  "count",
		Logf:     t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- g.Run(ctx) }()
	addrs := g.Addrs()
	pemCert, err := admin.NewClient(sock).CACert(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCert)
	apiAuth := fmt.Sprintf("api.test:%d", up.Port())

	answers := 0
	// status reads one HTTP response (an answer) or notes a closed
	// connection (also an answer, when the gateway refused by closing).
	readResp := func(br *bufio.Reader, method string) int {
		answers++
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return 0
		}
		if method != "CONNECT" {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp.StatusCode
	}
	dial := func(addr string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	expect := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d, want %d", what, got, want)
		}
	}

	// Explicit listener: a CONNECT tunnel with several HTTP/1 requests.
	c, br := dial(addrs.Proxy)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", apiAuth, apiAuth)
	expect("CONNECT", readResp(br, "CONNECT"), 200)
	tc := tls.Client(&rwConn{c, br}, &tls.Config{ServerName: "api.test", RootCAs: pool, NextProtos: []string{"http/1.1"}})
	tbr := bufio.NewReader(tc)
	for _, tt := range []struct {
		req  string
		want int
	}{
		{"GET /ok HTTP/1.1\r\nHost: " + apiAuth + "\r\n\r\n", 200},
		{"POST /x HTTP/1.1\r\nHost: " + apiAuth + "\r\nContent-Length: 0\r\n\r\n", 403},
		{"OPTIONS * HTTP/1.1\r\nHost: " + apiAuth + "\r\n\r\n", 403},
		{"GET /a/../b HTTP/1.1\r\nHost: " + apiAuth + "\r\n\r\n", 400},
		{"GET /h HTTP/1.1\r\nHost: other.test:1\r\n\r\n", 421},
		{"GET /bad HTTP/1.1\r\nHost: " + apiAuth + "\r\nBad Header\r\n\r\n", 400},
	} {
		io.WriteString(tc, tt.req)
		expect(strings.SplitN(tt.req, "\r\n", 2)[0], readResp(tbr, strings.Fields(tt.req)[0]), tt.want)
	}
	c.Close()
	// Explicit listener: HTTP/2 inside a tunnel (the Go client), then
	// refusals that need no tunnel.
	pu, _ := url.Parse("http://" + addrs.Proxy)
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	for _, m := range []string{"GET", "DELETE"} {
		req, _ := http.NewRequest(m, "https://"+apiAuth+"/h2", nil)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		answers++
		if m == "GET" {
			answers++ // the CONNECT
			expect("h2 GET", resp.StatusCode, 200)
		} else {
			expect("h2 DELETE", resp.StatusCode, 403)
		}
	}
	tr.CloseIdleConnections()
	for _, tt := range []struct {
		req  string
		want int
	}{
		{"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n", 403},
		{"GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n", 403},
		{"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nX: \x01\r\n\r\n", 400},
	} {
		c, br := dial(addrs.Proxy)
		io.WriteString(c, tt.req)
		expect(strings.SplitN(tt.req, "\r\n", 2)[0], readResp(br, strings.Fields(tt.req)[0]), tt.want)
		c.Close()
	}
	// A CONNECT whose TLS SNI disagrees: 200, then the handshake is
	// refused by closing (two answers, two receipts).
	c, br = dial(addrs.Proxy)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", apiAuth, apiAuth)
	expect("CONNECT for SNI mismatch", readResp(br, "CONNECT"), 200)
	if err := tls.Client(&rwConn{c, br}, &tls.Config{ServerName: "other.test", RootCAs: pool}).Handshake(); err == nil {
		t.Error("mismatched SNI accepted")
	}
	answers++
	c.Close()

	// Transparent listener: plain HTTP with a PROXY header.
	dst := netip.MustParseAddrPort(fmt.Sprintf("127.0.0.2:%d", up.Port()))
	for _, tt := range []struct {
		req  string
		want int
	}{
		{"GET / HTTP/1.1\r\nHost: denied.test:" + fmt.Sprint(up.Port()) + "\r\n\r\n", 403},
		{"OPTIONS * HTTP/1.1\r\nHost: " + apiAuth + "\r\n\r\n", 403},
		{"GET / HTTP/1.1\r\nHost: " + apiAuth + "\r\nBad Header\r\n\r\n", 400},
	} {
		c, br := dial(addrs.Transparent)
		hdr, _ := proxyproto.Append(nil, netip.MustParseAddrPort("127.0.0.1:40000"), dst)
		c.Write(hdr)
		io.WriteString(c, tt.req)
		expect("transparent "+strings.SplitN(tt.req, "\r\n", 2)[0], readResp(br, strings.Fields(tt.req)[0]), tt.want)
		c.Close()
	}
	// Transparent: neither TLS nor HTTP, refused by closing.
	c, br = dial(addrs.Transparent)
	hdr, _ := proxyproto.Append(nil, netip.MustParseAddrPort("127.0.0.1:40001"), dst)
	c.Write(append(hdr, "\x00\x01binary"...))
	if _, err := br.ReadByte(); err == nil {
		t.Error("raw bytes were answered")
	}
	answers++
	c.Close()

	// DNS, UDP and TCP.
	dnsq := func(netw string, m *mdns.Msg) int {
		answers++
		r, _, err := (&mdns.Client{Net: netw, Timeout: 5 * time.Second}).Exchange(m, addrs.DNS)
		if err != nil {
			t.Fatalf("dns: %v", err)
		}
		return r.Rcode
	}
	q := func(name string) *mdns.Msg { m := new(mdns.Msg); m.SetQuestion(name, mdns.TypeA); return m }
	expect("dns allowed", dnsq("udp", q("api.test.")), mdns.RcodeSuccess)
	expect("dns denied (sinkhole answer)", dnsq("tcp", q("denied.test.")), mdns.RcodeSuccess)
	two := q("api.test.")
	two.Question = append(two.Question, mdns.Question{Name: "x.test.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET})
	expect("dns two questions", dnsq("udp", two), mdns.RcodeFormatError)

	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	pub, err := receipts.LoadPublicKey(filepath.Join(ReceiptsKeyDir(filepath.Join(dir, "state")), receipts.PubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := receipts.VerifyFileSigned(filepath.Join(dir, "state", "receipts", "count.jsonl"), pub, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != uint64(answers) {
		b, _ := os.ReadFile(filepath.Join(dir, "state", "receipts", "count.jsonl"))
		t.Fatalf("%d answers but %d receipts:\n%s", answers, rep.Records, b)
	}
}

// rwConn reads through a bufio.Reader that may hold bytes already read.
type rwConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *rwConn) Read(p []byte) (int, error) { return c.br.Read(p) }
