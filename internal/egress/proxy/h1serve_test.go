package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"vak/internal/receipts"
)

// h1Tunnel opens a CONNECT tunnel to host:port and returns the connection
// the HTTP/1 loop serves: TLS (ALPN http/1.1) when tlsOn, else plain HTTP
// inside the tunnel.
func (h *harness) h1Tunnel(host string, port int, tlsOn bool) (net.Conn, *bufio.Reader) {
	h.t.Helper()
	c, br, status := h.rawConnect(fmt.Sprintf("%s:%d", host, port))
	if status != 200 {
		h.t.Fatalf("CONNECT %s:%d: %d", host, port, status)
	}
	var conn net.Conn = &bufConn{c, br}
	if tlsOn {
		tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: h.gwPool(), NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			h.t.Fatal(err)
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			h.t.Fatalf("ALPN %q", p)
		}
		conn = tc
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	h.t.Cleanup(func() { c.Close() })
	return conn, bufio.NewReader(conn)
}

// recordsSince returns the receipts appended after the first n.
func (h *harness) recordsSince(n int) []receipts.Record {
	return h.sink.Records()[n:]
}

// waitRecord waits for a receipt after the first n that fn accepts.
func (h *harness) waitRecord(n int, fn func(receipts.Record) bool) (receipts.Record, bool) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		for _, r := range h.recordsSince(n) {
			if fn(r) {
				return r, true
			}
		}
		if time.Now().After(deadline) {
			return receipts.Record{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestH1LoopRefusesLikeNetHTTP sends malformed and smuggling-shaped
// request heads to the HTTP/1 loop (inside intercepted TLS and plain
// tunnels) and to the explicit proxy (net/http's server): both refuse the
// same heads with the same status, each refusal has a receipt, and nothing
// refused reaches the upstream. Positive controls: the well-formed head of
// each group goes through.
func TestH1LoopRefusesLikeNetHTTP(t *testing.T) {
	h := newHarness(t)
	h.usePolicy(anyMethodPolicy)
	big := strings.Repeat("a", 16<<10)
	cases := []struct {
		name   string
		line   string // request line after the method and target
		hdr    string // header lines (each ending in \r\n), after Host
		noHost bool
		want   int
	}{
		{name: "control", want: 200},
		{name: "control, identical duplicate Content-Length", hdr: "Content-Length: 0\r\nContent-Length: 0\r\n", want: 200},
		{name: "control, empty chunked body", hdr: "Transfer-Encoding: chunked\r\n", want: 200},
		{name: "missing Host", noHost: true, want: 400},
		{name: "two Host headers", hdr: "Host: allowed.test\r\n", want: 400},
		{name: "malformed Host", hdr: "", want: 400, line: "host-bad"},
		{name: "space in header name", hdr: "Bad Header: x\r\n", want: 400},
		{name: "space before colon", hdr: "Transfer-Encoding : chunked\r\n", want: 400},
		{name: "control byte in value", hdr: "X-A: a\x01b\r\n", want: 400},
		{name: "NUL in value", hdr: "X-A: a\x00b\r\n", want: 400},
		// net/http unfolds obs-fold (RFC 9112 5.2: replace with a space);
		// TestH1LoopSmuggling checks what the upstream gets.
		{name: "obs-fold", hdr: "X-A: a\r\n b\r\n", want: 200},
		{name: "differing Content-Length", hdr: "Content-Length: 1\r\nContent-Length: 2\r\n", want: 400},
		{name: "negative Content-Length", hdr: "Content-Length: -1\r\n", want: 400},
		{name: "unknown transfer coding", hdr: "Transfer-Encoding: gzip\r\n", want: 501},
		{name: "chunked not last", hdr: "Transfer-Encoding: chunked, identity\r\n", want: 501},
		{name: "unknown Expect", hdr: "Expect: teapot\r\n", want: 417},
		{name: "HTTP/2.0 request line", line: "HTTP/2.0", want: 505},
		{name: "head over MaxHeaderBytes", hdr: "X-Big: " + big + "\r\n", want: 431},
	}
	port := h.upTLS.Port()
	plainPort := h.upPlain.Port()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			build := func(target string, p int) string {
				proto := "HTTP/1.1"
				host := fmt.Sprintf("Host: allowed.test:%d\r\n", p)
				switch tc.line {
				case "HTTP/2.0":
					proto = "HTTP/2.0"
				case "host-bad":
					host = "Host: allowed.test:1 2\r\n"
				}
				if tc.noHost {
					host = ""
				}
				body := ""
				if strings.Contains(tc.hdr, "chunked\r\n") {
					body = "0\r\n\r\n"
				}
				return fmt.Sprintf("GET %s %s\r\n%s%sConnection: close\r\n\r\n%s", target, proto, host, tc.hdr, body)
			}
			for _, leg := range []struct {
				name string
				send func() int
			}{
				{"explicit (net/http)", func() int {
					return h.rawHTTP(build(fmt.Sprintf("http://allowed.test:%d/refuse", plainPort), plainPort))
				}},
				{"loop, intercepted TLS", func() int {
					c, br := h.h1Tunnel("allowed.test", port, true)
					io.WriteString(c, build("/refuse", port))
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						return 0
					}
					resp.Body.Close()
					return resp.StatusCode
				}},
				{"loop, plain tunnel", func() int {
					c, br := h.h1Tunnel("allowed.test", plainPort, false)
					io.WriteString(c, build("/refuse", plainPort))
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						return 0
					}
					resp.Body.Close()
					return resp.StatusCode
				}},
			} {
				n := len(h.sink.Records())
				seenBefore := len(h.seen.all())
				got := leg.send()
				if got != tc.want {
					t.Errorf("%s: status %d, want %d", leg.name, got, tc.want)
					continue
				}
				if tc.want == 200 {
					continue
				}
				if len(h.seen.all()) != seenBefore {
					t.Errorf("%s: a refused request reached the upstream", leg.name)
				}
				if _, ok := h.waitRecord(n, func(r receipts.Record) bool {
					return r.Status == tc.want && r.Decision == receipts.Deny
				}); !ok {
					t.Errorf("%s: no receipt for the %d refusal: %+v", leg.name, tc.want, h.recordsSince(n))
				}
			}
		})
	}
}

// TestH1LoopSmuggling sends request heads that frame the body two ways
// (Content-Length and chunked): the gateway reads the body as chunked
// (RFC 9112 6.3), forwards it re-framed, and the bytes after the chunked
// body are a separate request with its own decision and receipt, never part
// of the first request's body upstream.
func TestH1LoopSmuggling(t *testing.T) {
	h := newHarness(t)
	h.usePolicy(anyMethodPolicy)
	port := h.upTLS.Port()
	c, br := h.h1Tunnel("allowed.test", port, true)
	smuggled := fmt.Sprintf("GET /smuggled HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", port)
	fmt.Fprintf(c, "POST /first HTTP/1.1\r\nHost: allowed.test:%d\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n%s",
		port, 15+len(smuggled), smuggled)
	for _, want := range []string{"path=/first", "path=/smuggled"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Fatalf("%s: %d %q", want, resp.StatusCode, b)
		}
	}
	for _, r := range h.seen.all() {
		if r.path == "/first" && r.body != "abc" {
			t.Fatalf("upstream got the first request with body %q", r.body)
		}
		if r.path == "/first" && (r.header.Get("Transfer-Encoding") != "" || len(r.header.Values("Content-Length")) > 1) {
			t.Fatalf("upstream got the first request with framing headers %v", r.header)
		}
	}
	// A folded header line arrives upstream as one value, not as a line
	// that could start a header of its own.
	fmt.Fprintf(c, "GET /folded HTTP/1.1\r\nHost: allowed.test:%d\r\nX-Folded: a\r\n X-Injected: 1\r\n\r\n", port)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("folded header: %v %v", resp, err)
	}
	for _, r := range h.seen.all() {
		if r.path == "/folded" && (r.header.Get("X-Folded") != "a X-Injected: 1" || r.header.Get("X-Injected") != "") {
			t.Fatalf("folded header reached the upstream as %q (X-Injected %q)", r.header.Get("X-Folded"), r.header.Get("X-Injected"))
		}
	}
	for _, p := range []string{"/first", "/smuggled", "/folded"} {
		h.receipt(func(r receipts.Record) bool { return r.Path == p && r.Decision == receipts.Allow })
	}
}

// TestH1LoopEdgeCases drives the loop over a plain tunnel against an
// upstream whose responses the test writes byte for byte.
func TestH1LoopEdgeCases(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	up := startRawUpstream(t, func(n int, r *http.Request) (string, bool) {
		switch r.URL.Path {
		case "/head":
			return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false
		case "/204":
			return "HTTP/1.1 204 No Content\r\n\r\n", false
		case "/304":
			return "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", false
		case "/chunked":
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n", false
		case "/1xx":
			return "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + okResponse("final"), false
		case "/cut":
			return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true
		case "/hang":
			<-release
			return okResponse("late"), true
		}
		return okResponse(fmt.Sprintf("%s%d", r.URL.Path, n)), false
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	port := up.port()
	h.pol.Store(h.policyFromTOML(fmt.Sprintf(`
[[network.rules]]
hosts = ["allowed.test"]
cidrs = ["127.0.0.2/32"]
ports = [%d]
`, port)))
	host := fmt.Sprintf("allowed.test:%d", port)
	req := func(method, path, extra string) string {
		return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", method, path, host, extra)
	}
	read := func(br *bufio.Reader, method string) (*http.Response, string, error) {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return nil, "", err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b), err
	}

	t.Run("pipelined requests are answered in order", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, false)
		io.WriteString(c, req("GET", "/p", "")+req("GET", "/q", "")+req("GET", "/r", ""))
		for _, want := range []string{"/p", "/q", "/r"} {
			resp, body, err := read(br, "GET")
			if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(body, want) {
				t.Fatalf("want %s: %v %q %v", want, resp, body, err)
			}
		}
	})
	t.Run("HEAD, 204 and 304 carry no body and keep the connection", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, false)
		for _, tc := range []struct {
			method, path string
			status       int
		}{{"HEAD", "/head", 200}, {"GET", "/204", 204}, {"GET", "/304", 304}, {"GET", "/after", 200}} {
			io.WriteString(c, req(tc.method, tc.path, ""))
			resp, body, err := read(br, tc.method)
			if err != nil || resp.StatusCode != tc.status {
				t.Fatalf("%s %s: %v %v", tc.method, tc.path, resp, err)
			}
			if tc.status != 200 || tc.method == "HEAD" {
				if body != "" {
					t.Fatalf("%s %s: body %q", tc.method, tc.path, body)
				}
			}
			if tc.method == "HEAD" && resp.ContentLength != 5 {
				t.Fatalf("HEAD lost the Content-Length: %d", resp.ContentLength)
			}
		}
	})
	t.Run("chunked response with trailer", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, false)
		io.WriteString(c, req("GET", "/chunked", ""))
		resp, body, err := read(br, "GET")
		if err != nil || body != "hello world" || resp.Trailer.Get("X-Sum") != "42" {
			t.Fatalf("%v %q trailer %v %v", resp, body, resp.Trailer, err)
		}
		if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
			t.Fatalf("transfer encoding %v", resp.TransferEncoding)
		}
	})
	t.Run("1xx from upstream is skipped", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, false)
		io.WriteString(c, req("GET", "/1xx", ""))
		resp, body, err := read(br, "GET")
		if err != nil || resp.StatusCode != 200 || body != "final" {
			t.Fatalf("%v %q %v", resp, body, err)
		}
	})
	t.Run("upstream closes mid-response: the client sees a cut, not a complete body", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, false)
		n := len(h.sink.Records())
		io.WriteString(c, req("GET", "/cut", ""))
		_, body, err := read(br, "GET")
		if err == nil {
			t.Fatalf("truncated response read as complete: %q", body)
		}
		if _, ok := h.waitRecord(n, func(r receipts.Record) bool {
			return r.Path == "/cut" && strings.Contains(r.Reason, "upstream body error")
		}); !ok {
			t.Fatalf("no receipt for the cut response: %+v", h.recordsSince(n))
		}
	})
	t.Run("client half-close still gets its response", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, false)
		io.WriteString(c, req("GET", "/half", ""))
		c.(*bufConn).Conn.(*net.TCPConn).CloseWrite()
		resp, body, err := read(br, "GET")
		if err != nil || resp.StatusCode != 200 || body != "/half1" {
			t.Fatalf("%v %q %v", resp, body, err)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("connection not closed after the half-closed client's request: %v", err)
		}
	})
	t.Run("Connection: close and HTTP/1.0 end the connection", func(t *testing.T) {
		for _, raw := range []string{
			req("GET", "/close", "Connection: close\r\n"),
			fmt.Sprintf("GET /ten HTTP/1.0\r\nHost: %s\r\n\r\n", host),
		} {
			c, br := h.h1Tunnel("allowed.test", port, false)
			io.WriteString(c, raw)
			resp, _, err := read(br, "GET")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%q: %v %v", raw, resp, err)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("%q: connection left open: %v", raw, err)
			}
		}
	})
	t.Run("HTTP/1.0 keep-alive", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, false)
		for range 2 {
			fmt.Fprintf(c, "GET /ka HTTP/1.0\r\nHost: %s\r\nConnection: keep-alive\r\n\r\n", host)
			resp, _, err := read(br, "GET")
			if err != nil || resp.StatusCode != 200 || resp.Close {
				t.Fatalf("%v %v", resp, err)
			}
		}
	})
	t.Run("client gone while the upstream is slow cancels the request", func(t *testing.T) {
		c, _ := h.h1Tunnel("allowed.test", port, false)
		n := len(h.sink.Records())
		io.WriteString(c, req("GET", "/hang", ""))
		time.Sleep(50 * time.Millisecond) // let the request reach the upstream
		c.Close()
		if _, ok := h.waitRecord(n, func(r receipts.Record) bool {
			return r.Path == "/hang" && strings.Contains(r.Reason, "client went away")
		}); !ok {
			t.Fatalf("request not cancelled when the client left: %+v", h.recordsSince(n))
		}
	})
	t.Run("slow request head is cut off", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, false)
		io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: allo")
		start := time.Now()
		if _, err := io.ReadAll(br); err != nil {
			t.Fatalf("slow head: %v", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("slow head cut after %v (ReadHeaderTimeout is 2s)", d)
		}
	})
}

// TestH1LoopBodies covers request bodies on the loop: 100-continue, a body
// the upstream does not read, and exactly one receipt per request.
func TestH1LoopBodies(t *testing.T) {
	h := newHarness(t)
	h.usePolicy(anyMethodPolicy)
	port := h.upTLS.Port()
	host := fmt.Sprintf("allowed.test:%d", port)

	t.Run("Expect: 100-continue", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, true)
		fmt.Fprintf(c, "POST /cont HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 100 {
			t.Fatalf("want 100 Continue before the body: %v %v", resp, err)
		}
		io.WriteString(c, "hello")
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), "body=hello") {
			t.Fatalf("%d %q", resp.StatusCode, b)
		}
	})
	t.Run("denied request with an unread body: drained or closed, never parsed", func(t *testing.T) {
		for _, size := range []int{64 << 10, 1 << 20} {
			c, br := h.h1Tunnel("allowed.test", port, true)
			n := len(h.sink.Records())
			inner := fmt.Sprintf("GET /inner HTTP/1.1\r\nHost: %s\r\n\r\n", host)
			body := strings.Repeat(inner, size/len(inner)+1)[:size]
			// A path the gateway refuses before reading the body.
			go fmt.Fprintf(c, "POST /a/../b HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", host, len(body), body)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 400 {
				t.Fatalf("%d: %v %v", size, resp, err)
			}
			io.Copy(io.Discard, resp.Body)
			if size < maxPostHandlerReadBytes && resp.Close {
				t.Fatalf("%d-byte unread body closed the connection", size)
			}
			if size > maxPostHandlerReadBytes && !resp.Close {
				t.Fatalf("%d-byte unread body: connection kept without Connection: close", size)
			}
			if !resp.Close {
				fmt.Fprintf(c, "GET /next HTTP/1.1\r\nHost: %s\r\n\r\n", host)
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("request after the drained body: %v %v", resp, err)
				}
				resp.Body.Close()
			}
			time.Sleep(100 * time.Millisecond)
			for _, r := range h.recordsSince(n) {
				if r.Path == "/inner" {
					t.Fatalf("body bytes were parsed as a request: %+v", r)
				}
			}
		}
	})
	t.Run("one receipt per request", func(t *testing.T) {
		c, br := h.h1Tunnel("allowed.test", port, true)
		n := len(h.sink.Records())
		for i := range 5 {
			fmt.Fprintf(c, "POST /one%d HTTP/1.1\r\nHost: %s\r\nContent-Length: 3\r\n\r\nabc", i, host)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%v %v", resp, err)
			}
			io.Copy(io.Discard, resp.Body)
		}
		time.Sleep(100 * time.Millisecond)
		count := map[string]int{}
		for _, r := range h.recordsSince(n) {
			count[r.Path]++
		}
		for i := range 5 {
			if p := fmt.Sprintf("/one%d", i); count[p] != 1 {
				t.Fatalf("%s: %d receipts, want 1 (%v)", p, count[p], count)
			}
		}
	})
}

// memConn is a connection whose reads come from a fixed input and then
// block (as a client waiting for its responses would) until the
// connection is closed or a read deadline passes; writes are collected.
type memConn struct {
	mu       sync.Mutex
	cond     sync.Cond
	r        *bytes.Reader
	out      bytes.Buffer
	closed   bool
	deadline time.Time
	blocked  int // reads waiting for input
}

func newMemConn(raw []byte) *memConn {
	c := &memConn{r: bytes.NewReader(raw)}
	c.cond.L = &c.mu
	return c
}

func (c *memConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.closed:
			return 0, net.ErrClosed
		case c.r.Len() > 0:
			return c.r.Read(b)
		case !c.deadline.IsZero() && !time.Now().Before(c.deadline):
			return 0, os.ErrDeadlineExceeded
		}
		if !c.deadline.IsZero() {
			t := time.AfterFunc(time.Until(c.deadline), func() {
				c.mu.Lock()
				c.cond.Broadcast()
				c.mu.Unlock()
			})
			defer t.Stop()
		}
		c.blocked++
		c.cond.Wait()
		c.blocked--
	}
}

func (c *memConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	return c.out.Write(b)
}

func (c *memConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

func (c *memConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// closeWhenIdle closes c once the server waits for input that will not
// come (all of it read, a read waiting, output unchanged for a while).
func (c *memConn) closeWhenIdle(active *atomic.Int64) {
	last, stable := -1, 0
	for {
		time.Sleep(time.Millisecond)
		c.mu.Lock()
		n, idle, closed := c.out.Len(), c.r.Len() == 0 && c.blocked > 0, c.closed
		c.mu.Unlock()
		if closed {
			return
		}
		// A handler waiting for the rest of a body is idle too; one that
		// runs is given longer.
		need := 5
		if active.Load() != 0 {
			need = 100
		}
		if idle && n == last {
			if stable++; stable >= need {
				c.Close()
				return
			}
		} else {
			stable = 0
		}
		last = n
	}
}

func (c *memConn) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// oneConnListener hands out one connection, then blocks until closed.
type oneConnListener struct {
	c    chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }

var statusLineRE = regexp.MustCompile(`(?m)^(HTTP/1\.[01] \d{3})`)

var fuzzActive atomic.Int64

// fuzzHandler reads the whole body and answers 200 (HEAD: no body).
func fuzzHandler(w http.ResponseWriter, r *http.Request) {
	fuzzActive.Add(1)
	defer fuzzActive.Add(-1)
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		io.WriteString(w, "handled\n")
	}
}

// statuses lists the status codes a server wrote for raw.
func loopStatuses(p *Proxy, raw []byte) []string {
	c := newMemConn(raw)
	go c.closeWhenIdle(&fuzzActive)
	p.serveH1(c, c, &connInfo{via: ViaTransparent}, nil)
	return statusCodes(c.output())
}

func netHTTPStatuses(raw []byte, maxHeader int) []string {
	c := newMemConn(raw)
	go c.closeWhenIdle(&fuzzActive)
	l := &oneConnListener{c: make(chan net.Conn, 1), done: make(chan struct{})}
	closed := make(chan struct{})
	srv := &http.Server{
		Handler:                      http.HandlerFunc(fuzzHandler),
		MaxHeaderBytes:               maxHeader,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				close(closed)
			}
		},
	}
	l.c <- c
	go srv.Serve(l)
	<-closed
	srv.Close()
	return statusCodes(c.output())
}

func statusCodes(out string) []string {
	var s []string
	for _, m := range statusLineRE.FindAllStringSubmatch(out, -1) {
		s = append(s, m[1])
	}
	return s
}

// FuzzH1LoopParsesLikeNetHTTP feeds the same bytes to the HTTP/1 loop and
// to net/http's server, both running a handler that reads the body and
// answers 200: they must write the same sequence of statuses (which
// requests reach the handler, which are refused and how, where the
// connection ends).
func FuzzH1LoopParsesLikeNetHTTP(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
		"GET / HTTP/1.1\r\nHost: a\r\nExpect: x\r\n\r\n",
		"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET http://b/ HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 5000) + "\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	const maxHeader = 4 << 10
	p := &Proxy{testH1Handler: fuzzHandler, Limits: Limits{MaxHeaderBytes: maxHeader}, Logf: func(string, ...any) {}}
	p.init()
	f.Cleanup(func() { p.Close() })
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := loopStatuses(p, raw)
		want := netHTTPStatuses(raw, maxHeader)
		if !slices.Equal(got, want) {
			t.Fatalf("loop wrote statuses %v, net/http %v for %q", got, want, raw)
		}
	})
}
