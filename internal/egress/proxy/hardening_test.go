package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"vak/internal/egress/secrets"
	"vak/internal/receipts"
)

// anyMethodPolicy allows every method (so that the secret checks, not the
// method list, decide) to allowed.test, other.test and *.wild.test.
const anyMethodPolicy = `
[[network.rules]]
name = "any method"
hosts = ["allowed.test", "other.test", "*.wild.test"]
cidrs = ["127.0.0.2/32"]
ports = [%[1]d, %[2]d]
websocket = true

[[network.rules]]
name = "echo"
protocol = "tcp"
hosts = ["tcp.test"]
cidrs = ["127.0.0.2/32"]
ports = [%[3]d]
`

func (h *harness) usePolicy(doc string) {
	h.t.Helper()
	h.pol.Store(h.policyFromTOML(fmt.Sprintf(doc, h.upTLS.Port(), h.upPlain.Port(), h.echo.Port())))
}

// rawHTTPS sends one raw HTTP/1.1 request inside an intercepted CONNECT
// tunnel to host and returns the status (0 when the connection failed).
func (h *harness) rawHTTPS(host, req string) int {
	h.t.Helper()
	c, br, status := h.rawConnect(fmt.Sprintf("%s:%d", host, h.upTLS.Port()))
	if status != 200 {
		return status
	}
	defer c.Close()
	tc := tls.Client(&bufConn{c, br}, &tls.Config{ServerName: host, RootCAs: h.gwPool(), NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(tc, req); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// rawHTTP sends one raw request to the explicit proxy (absolute form).
func (h *harness) rawHTTP(req string) int {
	h.t.Helper()
	c, err := net.Dial("tcp", h.explicit.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// upstreamGot reports whether any request the upstream received since
// index from contains s (any case) anywhere: method, header names and
// values, trailers, path, query, body.
func (h *harness) upstreamGot(from int, s string) bool {
	s = strings.ToLower(s)
	for _, r := range h.seen.all()[from:] {
		all := fmt.Sprintf("%s %s %s %s %v %v", r.method, r.path, r.query, r.body, r.header, r.trailer)
		if strings.Contains(strings.ToLower(all), s) {
			return true
		}
	}
	return false
}

// TestSecretsInOddPlaces sends a placeholder or a real value in every part
// of a request that is never substituted, through HTTP/1 (raw), HTTP/2 and
// plain HTTP, to bound and unbound hosts: each is refused with 403 and a
// receipt, and the upstream never sees it. Positive controls: the same
// requests without the secret go through.
func TestSecretsInOddPlaces(t *testing.T) {
	h := newHarness(t)
	h.usePolicy(anyMethodPolicy)
	gh := h.env("GH_TOKEN")
	tlsPort, plainPort := h.upTLS.Port(), h.upPlain.Port()
	type tc struct {
		name, host, method, header string
		want                       int
	}
	var cases []tc
	for _, host := range []string{"allowed.test", "other.test"} {
		cases = append(cases,
			tc{"control", host, "PATCH", "X-Ok: 1", 200},
			tc{"placeholder as method", host, gh, "X-Ok: 1", 403},
			tc{"placeholder as header name", host, "GET", "X-" + gh + ": 1", 403},
			tc{"placeholder as bare header name", host, "GET", gh + ": 1", 403},
		)
	}
	cases = append(cases,
		tc{"real value as method", "other.test", ghValue, "X-Ok: 1", 403},
		tc{"real value as header name", "other.test", "GET", "X-" + ghValue + ": 1", 403},
		tc{"real value as lower-case header name", "other.test", "GET", strings.ToLower("x-"+ghValue) + ": 1", 403},
	)
	for _, c := range cases {
		from := len(h.seen.all())
		req := fmt.Sprintf("%s /odd HTTP/1.1\r\nHost: %s:%d\r\n%s\r\nContent-Length: 0\r\n\r\n", c.method, c.host, tlsPort, c.header)
		if got := h.rawHTTPS(c.host, req); got != c.want {
			t.Errorf("https %s to %s: %d, want %d", c.name, c.host, got, c.want)
		}
		plain := fmt.Sprintf("%s http://%s:%d/odd HTTP/1.1\r\nHost: %s:%d\r\n%s\r\nContent-Length: 0\r\n\r\n", c.method, c.host, plainPort, c.host, plainPort, c.header)
		if got := h.rawHTTP(plain); got != c.want {
			t.Errorf("http %s to %s: %d, want %d", c.name, c.host, got, c.want)
		}
		if c.want == 403 {
			for _, bad := range []string{gh, ghValue} {
				if h.upstreamGot(from, bad) {
					t.Errorf("%s to %s: the upstream received it", c.name, c.host)
				}
			}
		}
	}
	// HTTP/2 (header names arrive lower-case).
	c2 := h.client(true)
	for _, c := range []struct {
		name, host, method, hname string
		want                      int
	}{
		{"control", "other.test", "PATCH", "X-Ok", 200},
		{"placeholder as method", "other.test", gh, "X-Ok", 403},
		{"placeholder as header name", "allowed.test", "GET", "X-" + gh, 403},
		{"real value as header name", "other.test", "GET", "X-" + ghValue, 403},
	} {
		from := len(h.seen.all())
		req, _ := http.NewRequest(c.method, h.url("https", c.host, "/odd2"), nil)
		req.Header.Set(c.hname, "1")
		resp, err := c2.Do(req)
		if err != nil {
			t.Fatalf("h2 %s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want || resp.ProtoMajor != 2 {
			t.Errorf("h2 %s: %d (HTTP/%d), want %d", c.name, resp.StatusCode, resp.ProtoMajor, c.want)
		}
		if c.want == 403 && (h.upstreamGot(from, gh) || h.upstreamGot(from, ghValue)) {
			t.Errorf("h2 %s: the upstream received it", c.name)
		}
	}
	// URL user information (absolute form): never forwarded; a placeholder
	// or value there is refused.
	for _, c := range []struct {
		name, userinfo string
		want           int
	}{
		{"control", "user:pass", 200},
		{"placeholder as password", "x:" + gh, 403},
		{"placeholder as user", gh, 403},
	} {
		req := fmt.Sprintf("GET http://%s@allowed.test:%d/u HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", c.userinfo, plainPort, plainPort)
		if got := h.rawHTTP(req); got != c.want {
			t.Errorf("userinfo %s: %d, want %d", c.name, got, c.want)
		}
	}
	if h.upstreamGot(0, "pass") {
		t.Error("URL user information was forwarded")
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Status == 403 && strings.Contains(r.Reason, "placeholder of secret GH_TOKEN in request method")
	})
	h.receipt(func(r receipts.Record) bool {
		return r.Status == 403 && strings.Contains(r.Reason, "in request header name to other.test")
	})
	h.receipt(func(r receipts.Record) bool {
		return r.Status == 403 && strings.Contains(r.Reason, "URL user information")
	})
	h.noSecretsInReceipts()
}

// TestSecretsInTrailers: trailers are forwarded (control), never receive
// secrets, and a placeholder or an unbound value in one cuts the request.
func TestSecretsInTrailers(t *testing.T) {
	h := newHarness(t)
	h.usePolicy(anyMethodPolicy)
	gh := h.env("GH_TOKEN")
	for _, h2 := range []bool{false, true} {
		c := h.client(h2)
		for _, tc := range []struct {
			name, host, value string
			want              int
		}{
			{"control", "other.test", "abc", 200},
			{"placeholder to bound host", "allowed.test", gh, 403},
			{"placeholder to unbound host", "other.test", gh, 403},
			{"real value to unbound host", "other.test", ghValue, 403},
		} {
			from := len(h.seen.all())
			req, _ := http.NewRequest("POST", h.url("https", tc.host, "/trailer"), io.MultiReader(strings.NewReader("data")))
			req.Trailer = http.Header{"X-Sum": {tc.value}}
			resp, err := c.Do(req)
			status := 0
			if err == nil {
				status = resp.StatusCode
				resp.Body.Close()
			}
			if status != tc.want {
				t.Errorf("h2=%v %s: %d (%v), want %d", h2, tc.name, status, err, tc.want)
			}
			if tc.want == 200 {
				if got := h.seen.last(t).trailer.Get("X-Sum"); got != "abc" {
					t.Errorf("h2=%v control: upstream trailer %q", h2, got)
				}
				continue
			}
			for _, r := range h.seen.all()[from:] {
				if v := r.trailer.Get("X-Sum"); v != "" {
					t.Errorf("h2=%v %s: upstream received trailer %q", h2, tc.name, v)
				}
			}
		}
	}
	// An HTTP/2 client may declare a length and trailers; the gateway
	// forwards both (chunked on an HTTP/1.1 upstream leg).
	req, _ := http.NewRequest("POST", h.url("https", "other.test", "/trailer"), strings.NewReader("data"))
	req.Trailer = http.Header{"X-Sum": {"len"}}
	if resp, err := h.client(true).Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("h2 trailer with a length: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if got := h.seen.last(t).trailer.Get("X-Sum"); got != "len" || h.seen.last(t).body != "data" {
		t.Errorf("h2 trailer with a length: upstream got trailer %q body %q", got, h.seen.last(t).body)
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Status == 403 && strings.Contains(r.Reason, "in request trailer X-Sum")
	})
	h.noSecretsInReceipts()
}

// TestNoInjectionOverCleartext: a placeholder toward its bound host over
// plain HTTP is refused (the value would travel unencrypted), over TLS it
// is substituted, and a secret with allow_plaintext is substituted over
// plain HTTP too.
func TestNoInjectionOverCleartext(t *testing.T) {
	h := newHarness(t)
	gh, ai := h.env("GH_TOKEN"), h.env("AI_KEY")
	c := h.client(false)
	for _, tc := range []struct {
		name, scheme, path string
		hdr                http.Header
		body               string
		want               int
	}{
		{"header over TLS", "https", "/h", http.Header{"Authorization": {"Bearer " + gh}}, "", 200},
		{"header over plain HTTP", "http", "/h", http.Header{"Authorization": {"Bearer " + gh}}, "", 403},
		{"query over plain HTTP", "http", "/q?key=" + ai, nil, "", 403},
		{"body over plain HTTP", "http", "/b", nil, "k=" + ai, 403},
	} {
		from := len(h.seen.all())
		var body io.Reader
		if tc.body != "" {
			body = strings.NewReader(tc.body)
		}
		method := "GET"
		if body != nil {
			method = "POST"
		}
		status, resp, _ := get(t, c, method, h.url(tc.scheme, "allowed.test", tc.path), tc.hdr, body)
		if status != tc.want {
			t.Errorf("%s: %d %s", tc.name, status, resp)
		}
		if tc.want == 403 {
			if !strings.Contains(resp, "allow_plaintext") {
				t.Errorf("%s: refusal does not explain: %s", tc.name, resp)
			}
			if h.upstreamGot(from, ghValue) || h.upstreamGot(from, aiValue) {
				t.Errorf("%s: value sent in the clear", tc.name)
			}
		}
	}
	// Transparent plain HTTP too.
	dst := netip.AddrPortFrom(netip.MustParseAddr(upstreamIP), uint16(h.upPlain.Port()))
	if status, _, _ := get(t, h.transparentClient(dst, false), "GET", h.url("http", "allowed.test", "/t"), http.Header{"Authorization": {"Bearer " + gh}}, nil); status != 403 {
		t.Errorf("transparent plain HTTP injection: %d", status)
	}
	// Opt-in.
	sec := secrets.NewForTest("GH_TOKEN", ghValue, secrets.Header, "allowed.test")
	sec.AllowPlaintext = true
	h.sess.Store(secrets.NewSession([]*secrets.Secret{sec}, h.sess.Load()))
	from := len(h.seen.all())
	if status, resp, _ := get(t, c, "GET", h.url("http", "allowed.test", "/h"), http.Header{"Authorization": {"Bearer " + gh}}, nil); status != 200 || h.seen.last(t).auth != "Bearer "+ghValue {
		// Say what the upstream got without printing the value: the
		// response echoes it redacted, so resp alone cannot tell.
		var got []string
		for _, r := range h.seen.all()[from:] {
			what := "other"
			switch r.auth {
			case "Bearer " + ghValue:
				what = "the real value"
			case "Bearer " + gh:
				what = "the placeholder"
			case "":
				what = "none"
			}
			got = append(got, fmt.Sprintf("%s %s%s: %s", r.method, r.host, r.path, what))
		}
		t.Errorf("allow_plaintext: %d %s; upstream received since the opt-in: %q", status, resp, got)
	}
	h.noSecretsInReceipts()
}

// TestForeignCredentials: toward a host with a bound secret, a credential
// that is not the placeholder is refused; the placeholder is swapped; no
// credential is decided by the policy as usual; the rule and the secret can
// opt out.
func TestForeignCredentials(t *testing.T) {
	h := newHarness(t)
	gh := h.env("GH_TOKEN")
	foreign := "ghp_attackersOwnKey_0000000000"
	for _, h2 := range []bool{false, true} {
		c := h.client(h2)
		for _, tc := range []struct {
			name string
			hdr  http.Header
			want int
			auth string
		}{
			{"foreign key in Authorization", http.Header{"Authorization": {"Bearer " + foreign}}, 403, ""},
			{"foreign key in X-Api-Key", http.Header{"X-Api-Key": {foreign}}, 403, ""},
			{"placeholder", http.Header{"Authorization": {"Bearer " + gh}}, 200, "Bearer " + ghValue},
			{"no credential", nil, 200, ""},
		} {
			from := len(h.seen.all())
			status, resp, _ := get(t, c, "GET", h.url("https", "allowed.test", "/fc"), tc.hdr, nil)
			if status != tc.want {
				t.Errorf("h2=%v %s: %d %s", h2, tc.name, status, resp)
			}
			if tc.want == 403 {
				if !strings.Contains(resp, "GH_TOKEN") || !strings.Contains(resp, "allow_foreign_credentials") {
					t.Errorf("h2=%v %s: refusal does not name the secret and header: %s", h2, tc.name, resp)
				}
				if h.upstreamGot(from, foreign) {
					t.Errorf("h2=%v %s: the upstream received the foreign key", h2, tc.name)
				}
			} else if got := h.seen.last(t).auth; got != tc.auth {
				t.Errorf("h2=%v %s: upstream Authorization %q", h2, tc.name, got)
			}
		}
		// Unbound host: credentials are the sandbox's business.
		if status, _, _ := get(t, c, "GET", h.url("https", "other.test", "/fc"), http.Header{"Authorization": {"Bearer " + foreign}}, nil); status != 200 {
			t.Errorf("h2=%v foreign credential to an unbound host: %d", h2, status)
		}
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Status == 403 && strings.Contains(r.Reason, "header X-Api-Key") && strings.Contains(r.Reason, "GH_TOKEN")
	})
	// Per-rule opt-out.
	h.usePolicy(anyMethodPolicy + `
[[network.rules]]
hosts = ["unused.test"]
`)
	h.pol.Store(h.policyFromTOML(`
[[network.rules]]
hosts = ["allowed.test"]
cidrs = ["127.0.0.2/32"]
allow_foreign_credentials = true
`))
	if status, resp, _ := get(t, h.client(false), "GET", h.url("https", "allowed.test", "/fc"), http.Header{"Authorization": {"Bearer " + foreign}}, nil); status != 200 || h.seen.last(t).auth != "Bearer "+foreign {
		t.Errorf("rule allow_foreign_credentials: %d %s", status, resp)
	}
	// Per-secret opt-out.
	h.pol.Store(h.defaultPolicy())
	sec := secrets.NewForTest("GH_TOKEN", ghValue, secrets.Header, "allowed.test")
	sec.AllowForeignCredentials = true
	sec2 := secrets.NewForTest("AI_KEY", aiValue, secrets.Query, "allowed.test")
	h.sess.Store(secrets.NewSession([]*secrets.Secret{sec, sec2}, h.sess.Load()))
	if status, resp, _ := get(t, h.client(false), "GET", h.url("https", "allowed.test", "/fc"), http.Header{"Authorization": {"Bearer " + foreign}}, nil); status != 200 {
		t.Errorf("secret allow_foreign_credentials: %d %s", status, resp)
	}
	h.noSecretsInReceipts()
}

// wsFrame builds one client frame (masked unless key is nil).
func wsFrame(fin bool, opcode byte, payload []byte, key []byte, rsv byte) []byte {
	b0 := opcode | rsv<<4
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	maskBit := byte(0)
	if key != nil {
		maskBit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		out = append(out, maskBit|byte(n))
	case n < 1<<16:
		out = append(out, maskBit|126, byte(n>>8), byte(n))
	default:
		out = append(out, maskBit|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	if key == nil {
		return append(out, payload...)
	}
	out = append(out, key...)
	for i, c := range payload {
		out = append(out, c^key[i%4])
	}
	return out
}

// TestWebSocketMaskedFrames: client frames are masked, so a value in them
// is invisible to a byte scanner; the relay unmasks payloads and scans them
// as one stream across frames.
func TestWebSocketMaskedFrames(t *testing.T) {
	h := newHarness(t)
	port := h.upTLS.Port()
	gh := h.env("GH_TOKEN")
	key := []byte{0x11, 0x22, 0x33, 0x44}
	openPath := func(path string, want int) (net.Conn, *bufio.Reader) {
		c, br, status := h.rawConnect(fmt.Sprintf("ws.test:%d", port))
		if status != 200 {
			t.Fatalf("CONNECT: %d", status)
		}
		tc := tls.Client(&bufConn{c, br}, &tls.Config{ServerName: "ws.test", RootCAs: h.gwPool(), NextProtos: []string{"http/1.1"}})
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: ws.test:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n", path, port)
		tbr := bufio.NewReader(tc)
		resp, err := http.ReadResponse(tbr, nil)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("upgrade %s: %v %v, want %d", path, resp, err, want)
		}
		return tc, tbr
	}
	open := func() (net.Conn, *bufio.Reader) { return openPath("/ws", 101) }
	// The offered compression never reaches the upstream, and an upstream
	// that negotiates it anyway is refused.
	c, _ := open()
	c.Close()
	if ext := h.seen.last(t).header.Get("Sec-Websocket-Extensions"); ext != "" {
		t.Errorf("upstream was offered %q", ext)
	}
	c, _ = openPath("/wsext", 502)
	c.Close()
	// Control: masked frames (small and 16-bit length) are relayed unchanged.
	c, br := open()
	for _, f := range [][]byte{wsFrame(true, 1, []byte("hello"), key, 0), wsFrame(true, 2, []byte(strings.Repeat("z", 300)), key, 0)} {
		c.Write(f)
		got := make([]byte, len(f))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != string(f) {
			t.Fatalf("masked echo: %q %v", got, err)
		}
	}
	c.Close()
	half := len(ghValue) / 2
	attacks := []struct {
		name   string
		frames []byte
	}{
		{"real value in a masked frame", wsFrame(true, 1, []byte("x "+ghValue), key, 0)},
		{"placeholder in a masked frame", wsFrame(true, 1, []byte(gh), key, 0)},
		{"value split across fragments", append(wsFrame(false, 1, []byte(ghValue[:half]), key, 0), wsFrame(true, 0, []byte(ghValue[half:]), []byte{9, 8, 7, 6}, 0)...)},
		{"value in an unmasked frame", wsFrame(true, 1, []byte(ghValue), nil, 0)},
		{"compressed frame (RSV1)", wsFrame(true, 1, []byte("x"), key, 4)},
	}
	for _, a := range attacks {
		c, br := open()
		c.Write(a.frames)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		back, _ := io.ReadAll(br)
		c.Close()
		// The upstream echoes what it received: no payload byte of the
		// attack may come back (frame headers may).
		if strings.Contains(string(back), string(a.frames[6:min(len(a.frames), 14)])) || strings.Contains(string(back), ghValue[:6]) {
			t.Errorf("%s: the upstream received payload bytes: %q", a.name, back)
		}
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Protocol == "wss" && strings.Contains(r.Reason, "cut: placeholder of secret GH_TOKEN in request WebSocket frame")
	})
	h.receipt(func(r receipts.Record) bool {
		return r.Protocol == "wss" && strings.Contains(r.Reason, "reserved bits")
	})
	h.noSecretsInReceipts()
}

// TestRawTCPSecrets: raw TCP relays to a tcp rule's host get the same
// matcher: a real value of an unbound secret or a placeholder cuts the
// stream before it reaches the upstream.
func TestRawTCPSecrets(t *testing.T) {
	h := newHarness(t)
	for _, payload := range []string{"ping " + ghValue + "\n", "ping " + h.env("AI_KEY") + "\n"} {
		ec, br, status := h.rawConnect(fmt.Sprintf("tcp.test:%d", h.echo.Port()))
		if status != 200 {
			t.Fatalf("CONNECT tcp.test: %d", status)
		}
		ec.Write([]byte(payload))
		ec.SetReadDeadline(time.Now().Add(5 * time.Second))
		back, _ := io.ReadAll(br)
		ec.Close()
		if strings.Contains(string(back), payload[5:12]) {
			t.Errorf("raw TCP relayed the secret: %q", back)
		}
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Protocol == "tcp" && strings.Contains(r.Reason, "cut: value of secret GH_TOKEN")
	})
	h.noSecretsInReceipts()
}

// TestReceiptsNeverHoldSecrets puts a real value or a placeholder into
// every receipt field the sandbox controls — CONNECT authority, SNI, Host,
// method, path, reason — and checks that each receipt names the secret
// instead.
func TestReceiptsNeverHoldSecrets(t *testing.T) {
	h := newHarness(t)
	h.usePolicy(anyMethodPolicy)
	gh := h.env("GH_TOKEN")
	lv := strings.ToLower(ghValue)
	tlsPort, plainPort := h.upTLS.Port(), h.upPlain.Port()
	// CONNECT authority.
	for _, name := range []string{lv + ".wild.test", gh + ".wild.test"} {
		if _, _, status := h.rawConnect(fmt.Sprintf("%s:%d", name, tlsPort)); status != 403 {
			t.Errorf("CONNECT %s: %d, want 403", name[:8], status)
		}
	}
	// SNI on the transparent listener.
	tc := tls.Client(h.transparentDial(netip.AddrPortFrom(netip.MustParseAddr(upstreamIP), uint16(tlsPort))), &tls.Config{ServerName: lv + ".wild.test", RootCAs: h.gwPool()})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Error("TLS with a secret in the SNI was intercepted")
	}
	tc.Close()
	// Host header (plain HTTP, explicit absolute form).
	if got := h.rawHTTP(fmt.Sprintf("GET http://%s.wild.test:%d/ HTTP/1.1\r\nHost: %s.wild.test:%d\r\n\r\n", lv, plainPort, lv, plainPort)); got != 403 {
		t.Errorf("secret in the Host: %d", got)
	}
	// Method and path.
	h.rawHTTP(fmt.Sprintf("%s http://other.test:%d/x HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", ghValue, plainPort, plainPort))
	h.rawHTTP(fmt.Sprintf("GET http://other.test:%d/p/%s HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", plainPort, gh, plainPort))
	// A reason that quotes the input (malformed Host).
	h.rawHTTPS("other.test", fmt.Sprintf("GET / HTTP/1.1\r\nHost: %s%%:%d\r\n\r\n", ghValue, tlsPort))
	for _, want := range []struct{ field, marker string }{
		{"host", "[secret:GH_TOKEN].wild.test"},
		{"host", "[placeholder:GH_TOKEN].wild.test"},
		{"method", "[secret:GH_TOKEN]"},
		{"path", "/p/[placeholder:GH_TOKEN]"},
	} {
		h.receipt(func(r receipts.Record) bool {
			switch want.field {
			case "host":
				return r.Host == want.marker
			case "method":
				return r.Method == want.marker
			default:
				return r.Path == want.marker
			}
		})
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Protocol == "tls" && strings.Contains(r.Host, "[secret:GH_TOKEN]")
	})
	h.noSecretsInReceipts()
	if h.canary.Accepted.Load()+h.canaryP.Accepted.Load() != 0 {
		t.Fatal("canary reached")
	}
}

// TestOptionsAsterisk: "OPTIONS *" inside a tunnel is decided by the
// policy and receipted like any request, never answered by net/http.
func TestOptionsAsterisk(t *testing.T) {
	h := newHarness(t)
	// allowed.test's rule lists GET, POST, HEAD only.
	before := len(h.sink.Records())
	if got := h.rawHTTPS("allowed.test", fmt.Sprintf("OPTIONS * HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", h.upTLS.Port())); got != 403 {
		t.Errorf("OPTIONS * under a rule without OPTIONS: %d, want 403", got)
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Method == "OPTIONS" && r.Path == "*" && r.Status == 403 && r.Host == "allowed.test"
	})
	// ws.test's rule allows any method: forwarded (the upstream answers).
	if got := h.rawHTTPS("ws.test", fmt.Sprintf("OPTIONS * HTTP/1.1\r\nHost: ws.test:%d\r\n\r\n", h.upTLS.Port())); got != 200 {
		t.Errorf("OPTIONS * under a rule without methods: %d", got)
	}
	h.receipt(func(r receipts.Record) bool {
		return r.Method == "OPTIONS" && r.Path == "*" && r.Decision == receipts.Allow && r.Host == "ws.test"
	})
	// One receipt per response: 2 tunnels (CONNECT 200 each) + 2 requests.
	if n := len(h.sink.Records()) - before; n != 4 {
		t.Errorf("%d receipts for 4 responses: %+v", n, h.sink.Records()[before:])
	}
	// HTTP/2 (":path *") too.
	for _, tc := range []struct {
		host string
		want int
	}{{"allowed.test", 403}, {"ws.test", 200}} {
		req := &http.Request{Method: "OPTIONS", URL: &url.URL{Scheme: "https", Host: fmt.Sprintf("%s:%d", tc.host, h.upTLS.Port()), Opaque: "*"}, Header: http.Header{}}
		resp, err := h.client(true).Do(req)
		if err != nil {
			t.Fatalf("h2 OPTIONS * to %s: %v", tc.host, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want || resp.ProtoMajor != 2 {
			t.Errorf("h2 OPTIONS * to %s: %d (HTTP/%d), want %d", tc.host, resp.StatusCode, resp.ProtoMajor, tc.want)
		}
	}
	before = len(h.sink.Records())
	// On the explicit listener it is not a proxy request: 400.
	if got := h.rawHTTP("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"); got != 400 {
		t.Errorf("OPTIONS * to the explicit proxy: %d", got)
	}
	if n := len(h.sink.Records()) - before; n != 1 {
		t.Errorf("%d receipts for 1 response: %+v", n, h.sink.Records()[before:])
	}
}

// TestResponseRedactionEncodings: a value in a response header name is
// redacted; stacked gzip layers are all decoded (and redacted); encodings
// the gateway cannot decode are refused.
func TestResponseRedactionEncodings(t *testing.T) {
	h := newHarness(t)
	c := h.client(false)
	status, body, hdr := get(t, c, "GET", h.url("https", "allowed.test", "/hdrname"), nil, nil)
	if status != 200 || body != "ok" {
		t.Fatalf("hdrname: %d %s", status, body)
	}
	for k := range hdr {
		if strings.Contains(strings.ToLower(k), strings.ToLower(ghValue)) {
			t.Fatalf("value in a response header name reached the client: %v", hdr)
		}
	}
	if hdr.Get("X-"+h.env("GH_TOKEN")) != "1" {
		t.Errorf("header not renamed to the placeholder: %v", hdr)
	}
	// Go's client would decode one gzip layer itself; ask for identity so
	// the test sees exactly what the gateway sent.
	for _, layers := range []int{0, 1, 2, 3} {
		status, body, hdr := get(t, c, "GET", h.url("https", "allowed.test", fmt.Sprintf("/gzip?layers=%d", layers)), http.Header{"Accept-Encoding": {"identity"}}, nil)
		want := "echo " + h.env("GH_TOKEN") + " end"
		if status != 200 || body != want || hdr.Get("Content-Encoding") != "" {
			t.Errorf("%d gzip layers: %d %q %v", layers, status, body, hdr)
		}
	}
	for _, q := range []string{"layers=1&enc=br", "layers=0&enc=deflate", "layers=6"} {
		if status, body, _ := get(t, c, "GET", h.url("https", "allowed.test", "/gzip?"+q), http.Header{"Accept-Encoding": {"identity"}}, nil); status != 502 || strings.Contains(body, ghValue) {
			t.Errorf("%s: %d %q, want 502", q, status, body)
		}
	}
}

// TestLogsNeverHoldSecrets: a log line that quotes sandbox input (here a
// panic value holding the path) is scrubbed like a receipt.
func TestLogsNeverHoldSecrets(t *testing.T) {
	h := newHarness(t)
	h.p.testHookRequest = func(r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/boom") {
			panic("fault at " + r.URL.Path)
		}
	}
	gh := h.env("GH_TOKEN")
	for _, p := range []string{"/boom/" + gh, "/boom/" + ghValue} {
		if status, _, _ := get(t, h.client(false), "GET", h.url("https", "allowed.test", p), nil, nil); status == 200 {
			t.Fatal("panicking request succeeded")
		}
	}
	h.receipt(func(r receipts.Record) bool { return strings.Contains(r.Reason, "internal error") })
	h.mu.Lock()
	defer h.mu.Unlock()
	found := 0
	for _, l := range h.logs {
		if strings.Contains(l, "fault at /boom/") {
			found++
		}
		if strings.Contains(strings.ToLower(l), strings.ToLower(ghValue)) || strings.Contains(l, gh) {
			t.Fatalf("log line holds a secret: %s", l)
		}
	}
	if found != 2 {
		t.Fatalf("the panics were not logged (%d): %q", found, h.logs)
	}
}
