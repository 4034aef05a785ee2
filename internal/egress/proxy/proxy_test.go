package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"vak/internal/egress/asks"
	"vak/internal/egress/egresstest"
	"vak/internal/egress/policy"
	"vak/internal/receipts"
)

func TestExplicitAllowDeny(t *testing.T) {
	h := newHarness(t)
	c := h.client(false)
	tests := []struct {
		name   string
		method string
		url    string
		status int
	}{
		{"allowed GET", "GET", h.url("https", "allowed.test", "/api/x"), 200},
		{"allowed mixed case + trailing dot", "GET", h.url("https", "ALLOWED.Test.", "/"), 200},
		{"allowed POST", "POST", h.url("https", "allowed.test", "/api"), 200},
		{"wildcard subdomain", "GET", h.url("https", "x.wild.test", "/"), 200},
		{"method not listed", "DELETE", h.url("https", "allowed.test", "/api/x"), 403},
		{"deny rule path", "GET", h.url("https", "allowed.test", "/admin/users"), 403},
		{"plain absolute-form", "GET", h.url("http", "allowed.test", "/plain"), 200},
		{"plain absolute-form denied path", "GET", h.url("http", "allowed.test", "/admin"), 403},
		{"dot segments refused", "GET", h.url("http", "allowed.test", "/api/../admin"), 400},
	}
	for _, tc := range tests {
		hits := h.upTLS.Hits.Load() + h.upPlain.Hits.Load()
		status, body, _ := get(t, c, tc.method, tc.url, nil, nil)
		if status != tc.status {
			t.Errorf("%s: status %d (%s), want %d", tc.name, status, body, tc.status)
		}
		after := h.upTLS.Hits.Load() + h.upPlain.Hits.Load()
		if tc.status == 200 && after != hits+1 {
			t.Errorf("%s: upstream hits %d -> %d", tc.name, hits, after)
		}
		if tc.status != 200 && after != hits {
			t.Errorf("%s: denied request reached the upstream", tc.name)
		}
	}
	// curl --http2 over plain HTTP asks for h2c: the upgrade is dropped and
	// the request proceeds.
	if status, body, _ := get(t, c, "GET", h.url("http", "allowed.test", "/h2c"), http.Header{"Upgrade": {"h2c"}, "Connection": {"Upgrade, HTTP2-Settings"}, "Http2-Settings": {"AAMAAABkAAQCAAAAAAIAAAAA"}}, nil); status != 200 {
		t.Errorf("h2c upgrade request: %d %s", status, body)
	}
	// Denied destinations: CONNECT refused, the canary never touched, while
	// the control above did reach the upstream.
	for _, u := range []string{
		h.url("https", "denied.test", "/"),
		h.url("https", "wild.test", "/"), // *.wild.test does not match wild.test
		h.url("https", "evil.test", "/"),
		fmt.Sprintf("https://allowed.test:%d/", h.echo.Port()), // port not in the rule
	} {
		status, body, _ := get(t, c, "GET", u, nil, nil)
		if status != 0 || !strings.Contains(body, "Forbidden") {
			t.Errorf("%s: got %d %q, want CONNECT refused with 403", u, status, body)
		}
	}
	if h.canary.Accepted.Load() != 0 || h.canaryP.Accepted.Load() != 0 {
		t.Fatal("a denied request reached the canary")
	}
	r := h.receipt(func(r receipts.Record) bool { return r.Protocol == "connect" && r.Host == "denied.test" })
	if r.Decision != receipts.Deny || r.Status != 403 || r.Rule != policy.NoRule {
		t.Fatalf("CONNECT receipt %+v", r)
	}
	r = h.receipt(func(r receipts.Record) bool { return r.Method == "DELETE" })
	if r.Decision != receipts.Deny || r.Host != "allowed.test" || r.Path != "/api/x" {
		t.Fatalf("DELETE receipt %+v", r)
	}
	r = h.receipt(func(r receipts.Record) bool { return r.Path == "/api/x" && r.Decision == receipts.Allow })
	if r.Status != 200 || r.BytesIn == 0 || r.RuleName != "allowed" || r.Protocol != "https" {
		t.Fatalf("allow receipt %+v", r)
	}
}

func TestPrivateAddressesRefused(t *testing.T) {
	h := newHarness(t)
	c := h.client(false)
	// nocidr.test is allowed by name but resolves to loopback, and its rule
	// lists no CIDR: refused at dial time.
	hits := h.upTLS.Hits.Load()
	status, body, _ := get(t, c, "GET", h.url("https", "nocidr.test", "/"), nil, nil)
	if status != 403 || !strings.Contains(body, "non-public") {
		t.Fatalf("nocidr.test: %d %s", status, body)
	}
	if h.upTLS.Hits.Load() != hits {
		t.Fatal("loopback upstream reached without a CIDR rule")
	}
	// Control: the same server is reachable under a name whose rule has the CIDR.
	if status, _, _ := get(t, c, "GET", h.url("https", "allowed.test", "/"), nil, nil); status != 200 {
		t.Fatalf("control: %d", status)
	}
}

func TestConnectIPLiteral(t *testing.T) {
	h := newHarness(t)
	for _, auth := range []string{
		fmt.Sprintf("%s:%d", canaryIP, h.canary.Port()),
		"169.254.169.254:80",
		"[::1]:443",
		fmt.Sprintf("[::ffff:%s]:%d", canaryIP, h.canary.Port()),
		"93.184.216.34:443",
	} {
		if _, _, status := h.rawConnect(auth); status != 403 {
			t.Errorf("CONNECT %s: status %d, want 403", auth, status)
		}
	}
	if h.canary.Accepted.Load() != 0 {
		t.Fatal("CONNECT to an IP literal reached the canary")
	}
	// Control: an IP literal inside a rule's CIDR is allowed, and the TLS
	// request inside works.
	c, br, status := h.rawConnect(fmt.Sprintf("%s:%d", upstreamIP, h.upTLS.Port()))
	if status != 200 {
		t.Fatalf("control CONNECT: %d", status)
	}
	defer c.Close()
	tc := tls.Client(&bufConn{c, br}, &tls.Config{ServerName: upstreamIP, RootCAs: h.gwPool()})
	fmt.Fprintf(tc, "GET /ip HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", upstreamIP, h.upTLS.Port())
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request to allowed IP literal: %v %v", resp, err)
	}
	resp.Body.Close()
}

type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.br.Read(p) }

func TestHostMustMatchSNI(t *testing.T) {
	h := newHarness(t)
	c, br, status := h.rawConnect(fmt.Sprintf("allowed.test:%d", h.upTLS.Port()))
	if status != 200 {
		t.Fatalf("CONNECT: %d", status)
	}
	defer c.Close()
	tc := tls.Client(&bufConn{c, br}, &tls.Config{ServerName: "allowed.test", RootCAs: h.gwPool(), NextProtos: []string{"http/1.1"}})
	tbr := bufio.NewReader(tc)
	send := func(host string) int {
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(tbr, nil)
		if err != nil {
			t.Fatalf("Host %s: %v", host, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	port := h.upTLS.Port()
	if got := send(fmt.Sprintf("denied.test:%d", port)); got != http.StatusMisdirectedRequest {
		t.Errorf("Host denied.test over SNI allowed.test: %d, want 421", got)
	}
	if got := send(fmt.Sprintf("other.test:%d", port)); got != http.StatusMisdirectedRequest {
		t.Errorf("Host other.test (allowed!) over SNI allowed.test: %d, want 421", got)
	}
	if got := send(fmt.Sprintf("allowed.test:%d", port+1)); got != http.StatusMisdirectedRequest {
		t.Errorf("other port in Host: %d, want 421", got)
	}
	if got := send("allowed.test"); got != 200 {
		t.Errorf("control: %d", got)
	}
	if h.canary.Accepted.Load() != 0 {
		t.Fatal("canary reached")
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Status == http.StatusMisdirectedRequest && r.Decision == receipts.Deny
	})

	// SNI that disagrees with the CONNECT authority: no handshake.
	c2, br2, status := h.rawConnect(fmt.Sprintf("allowed.test:%d", port))
	if status != 200 {
		t.Fatal(status)
	}
	defer c2.Close()
	tc2 := tls.Client(&bufConn{c2, br2}, &tls.Config{ServerName: "denied.test", RootCAs: h.gwPool()})
	if err := tc2.Handshake(); err == nil {
		t.Fatal("handshake with SNI denied.test in a tunnel to allowed.test succeeded")
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Protocol == "tls" && strings.Contains(r.Reason, "does not match the CONNECT authority")
	})
}

func TestTransparentDecidesOnNames(t *testing.T) {
	h := newHarness(t)
	canaryTLS := netip.AddrPortFrom(netip.MustParseAddr(canaryIP), uint16(h.upTLS.Port()))
	canaryPlain := netip.AddrPortFrom(netip.MustParseAddr(canaryIP), uint16(h.upPlain.Port()))

	// The client "connected" to the canary's IP, with SNI allowed.test: the
	// gateway dials what it resolved for allowed.test, never the canary.
	for _, h2 := range []bool{false, true} {
		c := h.transparentClient(canaryTLS, h2)
		status, body, hdr := get(t, c, "GET", h.url("https", "allowed.test", "/t"), nil, nil)
		if status != 200 || !strings.Contains(body, "host=allowed.test") {
			t.Fatalf("SNI allowed + canary IP (h2=%v): %d %s", h2, status, body)
		}
		if want := "1"; h2 && hdr.Get("X-Upstream-Proto") == "" {
			t.Fatalf("missing upstream proto header %q", want)
		}
	}
	// Plain HTTP "Host: allowed.test" sent to the canary's IP.
	c := h.transparentClient(canaryPlain, false)
	status, body, _ := get(t, c, "GET", h.url("http", "allowed.test", "/plain"), nil, nil)
	if status != 200 || !strings.Contains(body, "host=allowed.test") {
		t.Fatalf("Host allowed.test to canary IP: %d %s", status, body)
	}
	// A disallowed name over the transparent path: 403.
	status, _, _ = get(t, h.transparentClient(canaryTLS, false), "GET", h.url("https", "denied.test", "/"), nil, nil)
	if status != 403 {
		t.Fatalf("SNI denied.test: %d", status)
	}
	status, _, _ = get(t, c, "GET", h.url("http", "denied.test", "/"), nil, nil)
	if status != 403 {
		t.Fatalf("Host denied.test: %d", status)
	}
	// An IP-literal Host for the canary: 403.
	status, _, _ = get(t, c, "GET", fmt.Sprintf("http://%s:%d/", canaryIP, h.upPlain.Port()), nil, nil)
	if status != 403 {
		t.Fatalf("Host canary IP: %d", status)
	}
	if h.canary.Accepted.Load() != 0 || h.canaryP.Accepted.Load() != 0 {
		t.Fatalf("canary reached: %d %d", h.canary.Accepted.Load(), h.canaryP.Accepted.Load())
	}
	if h.upTLS.Hits.Load() < 2 || h.upPlain.Hits.Load() < 1 {
		t.Fatal("control requests did not reach the upstream")
	}
}

func TestHostnameTricks(t *testing.T) {
	h := newHarness(t)
	port := h.upTLS.Port()
	tests := []struct {
		authority string
		status    int
	}{
		{fmt.Sprintf("allowed.test.:%d", port), 200},
		{fmt.Sprintf("ALLOWED.TEST:%d", port), 200},
		{fmt.Sprintf("allowed.test%%00.evil.test:%d", port), 400},
		{fmt.Sprintf("allowed.test%%2e:%d", port), 400},
		{fmt.Sprintf("xn--llowed-2nf.test:%d", port), 403}, // Cyrillic 'а' homograph
		{fmt.Sprintf("allowed.test@evil.test:%d", port), 400},
		{fmt.Sprintf("allowed.test:%d:%d", port, port), 400},
		{fmt.Sprintf("allowed.test:+%d", port), 400},
	}
	for _, tc := range tests {
		c, _, status := h.rawConnect(tc.authority)
		if c != nil {
			c.Close()
		}
		if status != tc.status {
			t.Errorf("CONNECT %q: %d, want %d", tc.authority, status, tc.status)
		}
	}
	// A NUL byte in the request line: refused by the parser, with a receipt.
	c, err := net.Dial("tcp", h.explicit.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT allowed.test\x00.evil.test:%d HTTP/1.1\r\nHost: x\r\n\r\n", port)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	c.Close()
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("NUL in authority: %v %v", resp, err)
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Status == 400 && strings.Contains(r.Reason, "malformed request")
	})
	// The raw UTF-8 homograph is refused by the request parser or the policy.
	if c, _, status := h.rawConnect(fmt.Sprintf("\u0430llowed.test:%d", port)); status != 400 && status != 403 {
		if c != nil {
			c.Close()
		}
		t.Errorf("UTF-8 homograph CONNECT: %d", status)
	}
	// Host headers with %00, NUL, a homograph and a trailing dot inside an
	// intercepted connection (written raw: Go's client would clean them).
	for _, tc := range []struct {
		host   string
		status int
	}{
		{"allowed.test%00.evil.test", 400},
		{"allowed.test\x00", 400},
		{"allowed.test\x00.evil.test", 400},
		{"xn--llowed-2nf.test", 421},
		{"allowed.test.", 200},
		{"Allowed.TEST", 200},
	} {
		c, br, status := h.rawConnect(fmt.Sprintf("allowed.test:%d", port))
		if status != 200 {
			t.Fatal(status)
		}
		tc2 := tls.Client(&bufConn{c, br}, &tls.Config{ServerName: "allowed.test", RootCAs: h.gwPool(), NextProtos: []string{"http/1.1"}})
		fmt.Fprintf(tc2, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tc.host)
		resp, err := http.ReadResponse(bufio.NewReader(tc2), nil)
		c.Close()
		if err != nil || resp.StatusCode != tc.status {
			t.Errorf("Host %q: %v %v, want %d", tc.host, resp, err, tc.status)
		}
	}
	if h.canary.Accepted.Load() != 0 {
		t.Fatal("canary reached")
	}
}

func TestRawTCP(t *testing.T) {
	h := newHarness(t)
	canaryDst := netip.AddrPortFrom(netip.MustParseAddr(canaryIP), uint16(h.canary.Port()))
	// Attack: bytes that are neither TLS nor HTTP toward the canary.
	c := h.transparentDial(canaryDst)
	c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := c.Read(make([]byte, 10)); err == nil {
		t.Fatalf("raw TCP got %d bytes back", n)
	}
	c.Close()
	// Server-speaks-first (client sends nothing): refused after the peek timeout.
	c = h.transparentDial(canaryDst)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(make([]byte, 10)); err == nil {
		t.Fatal("silent raw TCP connection was served")
	}
	c.Close()
	// CONNECT to a host:port without a tcp rule, then raw bytes.
	tc, _, status := h.rawConnect(fmt.Sprintf("allowed.test:%d", h.upTLS.Port()))
	if status != 200 {
		t.Fatal(status)
	}
	tc.Write([]byte("\x00\x01binary"))
	tc.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := tc.Read(make([]byte, 10)); err == nil {
		t.Fatal("raw bytes in an HTTP tunnel were relayed")
	}
	tc.Close()
	if h.canary.Accepted.Load() != 0 {
		t.Fatal("raw TCP reached the canary")
	}
	h.receipt(func(r receipts.Record) bool { return r.Protocol == "tcp" && r.Decision == receipts.Deny })

	// Control: a tcp rule for tcp.test:echoport relays, via CONNECT...
	ec, br, status := h.rawConnect(fmt.Sprintf("tcp.test:%d", h.echo.Port()))
	if status != 200 {
		t.Fatalf("CONNECT tcp.test: %d", status)
	}
	ec.Write([]byte("ping"))
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo via CONNECT: %q %v", got, err)
	}
	ec.Close()
	// ...and transparently, when the client looked the name up through the
	// gateway's DNS (the address book).
	h.book.Store(true)
	tc2 := h.transparentDial(netip.AddrPortFrom(netip.MustParseAddr(upstreamIP), uint16(h.echo.Port())))
	tc2.Write([]byte("pong"))
	tc2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(tc2, got); err != nil || string(got) != "pong" {
		t.Fatalf("echo via transparent: %q %v", got, err)
	}
	tc2.Close()
	if h.echo.Accepted.Load() != 2 {
		t.Fatalf("echo accepted %d", h.echo.Accepted.Load())
	}
	r := h.receipt(func(r receipts.Record) bool {
		return r.Protocol == "tcp" && r.Decision == receipts.Allow && r.Host == "tcp.test"
	})
	if r.BytesOut != 4 || r.BytesIn != 4 {
		t.Fatalf("tcp receipt bytes: %+v", r)
	}
}

func TestWebSocket(t *testing.T) {
	h := newHarness(t)
	port := h.upTLS.Port()
	try := func(host, path string) (int, net.Conn, *bufio.Reader) {
		c, br, status := h.rawConnect(fmt.Sprintf("%s:%d", host, port))
		if status != 200 {
			t.Fatalf("CONNECT %s: %d", host, status)
		}
		tc := tls.Client(&bufConn{c, br}, &tls.Config{ServerName: host, RootCAs: h.gwPool(), NextProtos: []string{"http/1.1"}})
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", path, host, port)
		tbr := bufio.NewReader(tc)
		resp, err := http.ReadResponse(tbr, nil)
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		return resp.StatusCode, tc, tbr
	}
	hits := h.upTLS.Hits.Load()
	status, c, _ := try("allowed.test", "/ws") // allowed for HTTP, but not for WebSocket
	c.Close()
	if status != 403 || h.upTLS.Hits.Load() != hits {
		t.Fatalf("websocket on a rule without websocket=true: %d", status)
	}
	status, c, br := try("ws.test", "/ws")
	defer c.Close()
	if status != 101 {
		t.Fatalf("allowed websocket: %d", status)
	}
	c.Write([]byte("\x81\x05hello"))
	got := make([]byte, 7)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "\x81\x05hello" {
		t.Fatalf("websocket echo: %q %v", got, err)
	}
	// The sandbox cannot push a real secret value out through the socket...
	c.Write([]byte("\x81\x1e" + ghValue))
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if b, _ := io.ReadAll(br); strings.Contains(string(b), ghValue[:10]) {
		t.Fatal("secret value echoed through a websocket")
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Protocol == "wss" && strings.Contains(r.Reason, "cut: value of secret GH_TOKEN")
	})
	// ...and a real value sent by the upstream cuts the connection before
	// any of it reaches the client.
	status, c2, br2 := try("ws.test", "/wsleak")
	defer c2.Close()
	if status != 101 {
		t.Fatalf("wsleak: %d", status)
	}
	c2.SetReadDeadline(time.Now().Add(3 * time.Second))
	if b, _ := io.ReadAll(br2); strings.Contains(string(b), ghValue[:4]) {
		t.Fatalf("secret value relayed in a websocket frame: %q", b)
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Protocol == "wss" && strings.Contains(r.Reason, "secret value appeared")
	})
}

func TestMalformedAndSlowClients(t *testing.T) {
	h := newHarness(t)
	send := func(raw string) (int, error) {
		c, err := net.Dial("tcp", h.explicit.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte(raw))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		return resp.StatusCode, nil
	}
	for _, tc := range []struct {
		raw    string
		status int
	}{
		{"GARBAGE\r\n\r\n", 400},
		{"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n", 400},
		{"GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", 431},
		{"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400}, // origin-form: not a proxy request
		{"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 0},
	} {
		status, err := send(tc.raw)
		if tc.status != 0 && status != tc.status {
			t.Errorf("%.40q: %d %v, want %d", tc.raw, status, err, tc.status)
		}
	}
	for _, st := range []int{400, 431} {
		h.receipt(func(r receipts.Record) bool { return r.Status == st && r.Decision == receipts.Deny })
	}
	// Slowloris: a request head that never finishes is cut off.
	c, err := net.Dial("tcp", h.explicit.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET http://allowed.test/ HTTP/1.1\r\nHost: allo"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err = io.ReadAll(c)
	c.Close()
	if err != nil || time.Since(start) > 9*time.Second {
		t.Fatalf("slow client not cut off: %v after %v", err, time.Since(start))
	}
	// Transparent connection without a PROXY header.
	tc, err := net.Dial("tcp", h.transparent.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc.Write([]byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"))
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, _ := io.ReadAll(tc); len(b) != 0 {
		t.Fatalf("request without PROXY header answered: %q", b)
	}
	tc.Close()
	h.receipt(func(r receipts.Record) bool { return strings.Contains(r.Reason, "PROXY v2 header") })
}

func TestPanicDoesNotKillGateway(t *testing.T) {
	h := newHarness(t)
	h.p.testHookRequest = func(r *http.Request) {
		if r.URL.Path == "/boom" {
			panic("injected fault")
		}
	}
	c := h.client(true)
	if status, _, _ := get(t, c, "GET", h.url("https", "allowed.test", "/boom"), nil, nil); status == 200 {
		t.Fatal("panicking request succeeded")
	}
	for i := range 3 {
		if status, body, _ := get(t, c, "GET", h.url("https", "allowed.test", "/after"), nil, nil); status != 200 {
			t.Fatalf("request %d after the panic: %d %s", i, status, body)
		}
	}
	h.receipt(func(r receipts.Record) bool { return r.Path == "/boom" && strings.Contains(r.Reason, "internal error") })
}

func TestReloadKeepsInFlightAndRevokeCloses(t *testing.T) {
	h := newHarness(t)
	c := h.client(false)
	start := func(path string) (*http.Response, *bufio.Reader) {
		resp, err := c.Get(h.url("https", "allowed.test", path))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		if err != nil || line != "first\n" {
			t.Fatalf("first line %q %v", line, err)
		}
		return resp, br
	}
	// Reload to a policy that still allows: the stream finishes normally.
	resp, br := start("/slow")
	h.pol.Store(h.defaultPolicy())
	h.p.PolicyChanged()
	// Reload to a policy that denies allowed.test, without revoke: in-flight
	// requests are not dropped, new ones are denied.
	denyAll := h.policyFromTOML(fmt.Sprintf(`
[[network.rules]]
hosts = ["other.test"]
cidrs = ["127.0.0.2/32"]
ports = [%d]
`, h.upTLS.Port()))
	h.pol.Store(denyAll)
	h.p.PolicyChanged()
	if status, body, _ := get(t, c, "GET", h.url("https", "allowed.test", "/new"), nil, nil); status != 403 && !strings.Contains(body, "Forbidden") {
		t.Fatalf("new request after reload: %d %s", status, body)
	}
	close(h.release)
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || string(rest) != "second\n" {
		t.Fatalf("in-flight request across reload: %q %v", rest, err)
	}

	// Revoke closes a denied long-lived stream.
	h.release = make(chan struct{})
	h.pol.Store(h.defaultPolicy())
	resp, br = start("/slow")
	defer resp.Body.Close()
	// A long-lived raw TCP flow too.
	ec, ebr, status := h.rawConnect(fmt.Sprintf("tcp.test:%d", h.echo.Port()))
	if status != 200 {
		t.Fatal(status)
	}
	defer ec.Close()
	ec.Write([]byte("x"))
	if b, err := ebr.ReadByte(); err != nil || b != 'x' {
		t.Fatal("echo", err)
	}
	// An allowed stream to another host stays up.
	other, obr := func() (*http.Response, *bufio.Reader) {
		resp, err := c.Get(h.url("https", "other.test", "/slow"))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		if l, _ := br.ReadString('\n'); l != "first\n" {
			t.Fatal("other first line", l)
		}
		return resp, br
	}()
	defer other.Body.Close()
	h.pol.Store(denyAll)
	n := h.p.Revoke()
	if n < 2 {
		t.Fatalf("Revoke closed %d flows, want the stream and the tcp relay", n)
	}
	if _, err := io.ReadAll(br); err == nil {
		t.Fatal("revoked stream ended cleanly instead of being cut")
	}
	ec.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := ebr.ReadByte(); err == nil {
		t.Fatal("revoked tcp relay still open")
	}
	close(h.release)
	if rest, err := io.ReadAll(obr); err != nil || string(rest) != "second\n" {
		t.Fatalf("allowed stream was affected by revoke: %q %v", rest, err)
	}
	h.receipt(func(r receipts.Record) bool {
		return strings.HasPrefix(r.Reason, "revoked:") && r.Decision == receipts.Deny
	})
}

// TestRevokeWhileAwaitingResponse: a request revoked while the gateway
// waits for the upstream's response head ends with an error for the
// client, its upstream connection is closed (the upstream sees its client
// go), and it has one receipt of its own besides Revoke's, on the HTTP/1
// loop (intercepted TLS) and through net/http (the explicit proxy's plain
// HTTP) alike.
func TestRevokeWhileAwaitingResponse(t *testing.T) {
	for _, scheme := range []string{"https", "http"} {
		t.Run(scheme, func(t *testing.T) {
			h := newHarness(t)
			c := h.client(false)
			errc := make(chan error, 1)
			go func() {
				resp, err := c.Get(h.url(scheme, "allowed.test", "/hold"))
				if err == nil {
					resp.Body.Close()
					err = fmt.Errorf("revoked request got a response: %s", resp.Status)
				} else {
					err = nil
				}
				errc <- err
			}()
			<-h.held // the gateway now waits for the response head
			h.pol.Store(h.policyFromTOML(fmt.Sprintf(`
[[network.rules]]
hosts = ["other.test"]
cidrs = ["127.0.0.2/32"]
ports = [%d, %d]
`, h.upTLS.Port(), h.upPlain.Port())))
			if n := h.p.Revoke(); n < 1 {
				t.Fatalf("Revoke closed %d flows", n)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			<-h.gone // the upstream connection was closed
			h.receipt(func(r receipts.Record) bool {
				return r.Path == "/hold" && r.Reason == "revoked before the response arrived"
			})
			var own, revoked int
			for _, r := range h.sink.Records() {
				switch {
				case r.Path != "/hold":
				case strings.HasPrefix(r.Reason, "revoked:"):
					revoked++
				default:
					own++
					if r.Decision != receipts.Deny || r.Reason != "revoked before the response arrived" {
						t.Errorf("request's receipt: %+v", r)
					}
				}
			}
			if own != 1 || revoked != 1 {
				t.Fatalf("receipts for /hold: %d of its own, %d from Revoke; want 1 and 1: %+v", own, revoked, h.sink.Records())
			}
		})
	}
}

func TestReceiptsFailClosed(t *testing.T) {
	h := newHarness(t)
	h.sink.Fail.Store(true)
	c := h.client(false)
	status, _, _ := get(t, c, "GET", h.url("https", "allowed.test", "/"), nil, nil)
	if status != 0 && status != 503 {
		t.Fatalf("with receipts broken: %d", status)
	}
	if h.upTLS.Hits.Load() != 0 {
		t.Fatal("traffic allowed while receipts cannot be written")
	}
}

func TestUpstreamCertificateVerified(t *testing.T) {
	h := newHarness(t)
	// A server at an allowed name whose certificate comes from a CA the
	// gateway does not trust (a MITM between gateway and upstream).
	rogueCA := egresstest.NewCA(t)
	rogue := egresstest.StartTLS(t, egresstest.Listen(t, upstreamIP, 0), rogueCA, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "rogue")
	}), "allowed.test")
	h.pol.Store(h.policyFromTOML(fmt.Sprintf(`
[[network.rules]]
hosts = ["allowed.test"]
cidrs = ["127.0.0.2/32"]
ports = [%d]
`, rogue.Port())))
	status, body, _ := get(t, h.client(false), "GET", fmt.Sprintf("https://allowed.test:%d/", rogue.Port()), nil, nil)
	if status != http.StatusBadGateway || strings.Contains(body, "rogue") {
		t.Fatalf("untrusted upstream: %d %q", status, body)
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Status == http.StatusBadGateway && strings.Contains(r.Reason, "certificate")
	})
	// Clients may not downgrade the intercepted leg below TLS 1.2.
	c, br, st := h.rawConnect(fmt.Sprintf("allowed.test:%d", rogue.Port()))
	if st != 200 {
		t.Fatal(st)
	}
	defer c.Close()
	tc := tls.Client(&bufConn{c, br}, &tls.Config{ServerName: "allowed.test", RootCAs: h.gwPool(), MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10})
	if err := tc.Handshake(); err == nil {
		t.Fatal("TLS 1.1 handshake accepted")
	}
}

// TestAskedRequestAndRevoke: with asking on, a request no rule allows
// (PUT: the allow rule names other methods) waits for an answer; allowed,
// it goes upstream, and a revoke under the same rules leaves it (a person
// allowed it), while a revoke after a rule that denies it ends it.
func TestAskedRequestAndRevoke(t *testing.T) {
	h := newHarness(t)
	reg := asks.New(asks.Options{Timeout: time.Minute})
	h.p.Asks = func() *asks.Registry { return reg }
	c := h.client(false)
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("PUT", h.url("https", "allowed.test", "/hold"), strings.NewReader("x"))
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("a revoked request got a response: %s", resp.Status)
		} else {
			err = nil
		}
		errc <- err
	}()
	var pending []asks.Ask
	for deadline := time.Now().Add(10 * time.Second); len(pending) == 0 && time.Now().Before(deadline); pending = reg.Pending() {
		time.Sleep(5 * time.Millisecond)
	}
	if len(pending) != 1 || pending[0].Method != "PUT" || pending[0].Host != "allowed.test" || pending[0].Path != "/hold" {
		t.Fatalf("pending asks: %+v", pending)
	}
	if err := reg.Answer(pending[0].ID, asks.Answer{Allow: true, Scope: asks.Once, By: "test"}); err != nil {
		t.Fatal(err)
	}
	<-h.held // upstream has it
	if n := h.p.Revoke(); n != 0 {
		t.Fatalf("a revoke under the same rules closed %d flow(s), the asked request among them", n)
	}
	h.pol.Store(h.policyFromTOML(`
[[network.rules]]
action = "deny"
hosts = ["allowed.test"]
`))
	if n := h.p.Revoke(); n < 1 {
		t.Fatalf("a revoke after a deny rule closed %d flows", n)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Method == "PUT" && strings.HasPrefix(r.Reason, "revoked:") && strings.Contains(r.Reason, "denies")
	})
}
