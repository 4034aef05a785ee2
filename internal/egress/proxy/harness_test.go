package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"vak/internal/egress/ca"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/egresstest"
	"vak/internal/egress/policy"
	"vak/internal/egress/proxyproto"
	"vak/internal/egress/secrets"
	"vak/internal/receipts"
)

// Real secret values used by the tests.
const (
	ghValue = "ghp_REALVALUE_0123456789abcdef"
	aiValue = "sk-REAL-KEY-abcdefgh-42"
)

const (
	upstreamIP = "127.0.0.2" // where allowed names resolve
	canaryIP   = "127.0.0.3" // where nothing may ever go
)

// seen is what the upstream really received (the client only ever sees
// redacted responses).
type seen struct {
	mu   sync.Mutex
	reqs []seenReq
}

type seenReq struct {
	host, path, query, auth, body string
	proto                         int
	method                        string
	header, trailer               http.Header
}

func (s *seen) add(r seenReq) { s.mu.Lock(); s.reqs = append(s.reqs, r); s.mu.Unlock() }

func (s *seen) all() []seenReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenReq(nil), s.reqs...)
}

func (s *seen) last(t testing.TB) seenReq {
	t.Helper()
	a := s.all()
	if len(a) == 0 {
		t.Fatal("upstream received nothing")
	}
	return a[len(a)-1]
}

type harness struct {
	t           testing.TB
	p           *Proxy
	pol         atomic.Pointer[policy.Policy]
	sess        atomic.Pointer[secrets.Session]
	sink        *egresstest.Sink
	gwCA        *ca.Authority
	upCA        *egresstest.CA
	explicit    net.Listener
	transparent net.Listener
	overrides   map[string][]netip.Addr

	upTLS   *egresstest.Server // https on upstreamIP:port
	upPlain *egresstest.Server // http on upstreamIP:plainPort
	canary  *egresstest.Canary // canaryIP:port (same port as upTLS)
	canaryP *egresstest.Canary // canaryIP:plainPort
	echo    *egresstest.Canary // raw TCP echo on upstreamIP
	seen    *seen
	release chan struct{} // lets /slow and /hold finish
	// held receives when /hold has its request, gone when /hold saw its
	// client (the gateway) go away before release.
	held, gone chan struct{}

	mu      sync.Mutex
	clients []*http.Transport
	logs    []string // what the gateway logged
	// book makes NamesFor report tcp.test for upstreamIP, as if the client
	// had looked it up through the gateway's DNS.
	book atomic.Bool
}

const policyTOML = `
[[network.rules]]
name = "no admin"
action = "deny"
hosts = ["allowed.test"]
paths = ["/admin"]

[[network.rules]]
name = "allowed"
hosts = ["allowed.test", "other.test", "*.wild.test", "private.test"]
cidrs = ["127.0.0.2/32"]
methods = ["GET", "POST", "HEAD"]
ports = [%[1]d, %[2]d]

[[network.rules]]
name = "ws"
hosts = ["ws.test"]
cidrs = ["127.0.0.2/32"]
ports = [%[1]d, %[2]d]
websocket = true

[[network.rules]]
name = "nocidr"
hosts = ["nocidr.test"]

[[network.rules]]
name = "echo"
protocol = "tcp"
hosts = ["tcp.test"]
cidrs = ["127.0.0.2/32"]
ports = [%[3]d]
`

func (h *harness) policyFromTOML(doc string) *policy.Policy {
	h.t.Helper()
	s, err := egressconfig.Decode("test.toml", []byte(doc))
	if err != nil {
		h.t.Fatal(err)
	}
	cfg, err := egressconfig.Validate("test.toml", s)
	if err != nil {
		h.t.Fatal(err)
	}
	return cfg.Policy
}

func (h *harness) defaultPolicy() *policy.Policy {
	return h.policyFromTOML(fmt.Sprintf(policyTOML, h.upTLS.Port(), h.upPlain.Port(), h.echo.Port()))
}

// newHarness starts upstreams, a canary on the same ports at canaryIP, and a
// gateway with the default policy. Cleanups close everything and check that
// no goroutine leaked.
func newHarness(t testing.TB) *harness {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	h := &harness{t: t, sink: &egresstest.Sink{}, seen: &seen{}, release: make(chan struct{}), held: make(chan struct{}, 4), gone: make(chan struct{}, 4)}
	h.upCA = egresstest.NewCA(t)
	var err error
	h.gwCA, err = ca.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	handler := h.upstreamHandler()
	ls := egresstest.ListenSamePort(t, upstreamIP, canaryIP)
	names := []string{"allowed.test", "other.test", "x.wild.test", "ws.test", "private.test", "nocidr.test", "denied.test", "127.0.0.2"}
	h.upTLS = egresstest.StartTLS(t, ls[0], h.upCA, handler, names...)
	h.canary = egresstest.StartCanary(t, ls[1])
	lp := egresstest.ListenSamePort(t, upstreamIP, canaryIP)
	h.upPlain = egresstest.StartPlain(t, lp[0], handler)
	h.canaryP = egresstest.StartCanary(t, lp[1])
	h.echo = egresstest.StartEcho(t, egresstest.Listen(t, upstreamIP, 0))
	h.overrides = map[string][]netip.Addr{
		"allowed.test": {netip.MustParseAddr(upstreamIP)},
		"other.test":   {netip.MustParseAddr(upstreamIP)},
		"x.wild.test":  {netip.MustParseAddr(upstreamIP)},
		"ws.test":      {netip.MustParseAddr(upstreamIP)},
		"tcp.test":     {netip.MustParseAddr(upstreamIP)},
		"nocidr.test":  {netip.MustParseAddr(upstreamIP)},
		"denied.test":  {netip.MustParseAddr(canaryIP)},
	}
	h.pol.Store(h.defaultPolicy())
	h.sess.Store(secrets.NewSession([]*secrets.Secret{
		secrets.NewForTest("GH_TOKEN", ghValue, secrets.Header, "allowed.test"),
		secrets.NewForTest("AI_KEY", aiValue, secrets.Header|secrets.Query|secrets.Body, "allowed.test"),
	}, nil))
	h.p = &Proxy{
		Policy:  func() *policy.Policy { return h.pol.Load() },
		Secrets: func() *secrets.Session { return h.sess.Load() },
		CA:      h.gwCA,
		Resolve: func(ctx context.Context, name string) ([]netip.Addr, error) {
			if a, ok := h.overrides[name]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("no such host %s", name)
		},
		NamesFor: func(client, addr netip.Addr) []string {
			if h.book.Load() && addr == netip.MustParseAddr(upstreamIP) {
				return []string{"tcp.test"}
			}
			return nil
		},
		Receipts: h.sink,
		RootCAs:  h.upCA.Pool(),
		Session:  "test",
		Limits:   Limits{ReadHeaderTimeout: 2 * time.Second, PeekTimeout: 500 * time.Millisecond, TLSHandshakeTimeout: 2 * time.Second, MaxHeaderBytes: 8 << 10},
		Logf: func(format string, args ...any) {
			h.mu.Lock()
			h.logs = append(h.logs, fmt.Sprintf(format, args...))
			h.mu.Unlock()
			t.Logf(format, args...)
		},
	}
	h.explicit = egresstest.Listen(t, "127.0.0.1", 0)
	h.transparent = egresstest.Listen(t, "127.0.0.1", 0)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.p.ServeExplicit(h.explicit) }()
	go func() { defer wg.Done(); h.p.ServeTransparent(h.transparent, ProxyProtocol) }()
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		h.mu.Lock()
		for _, tr := range h.clients {
			tr.CloseIdleConnections()
		}
		h.mu.Unlock()
		h.p.Close()
		h.explicit.Close()
		wg.Wait()
	})
	return h
}

// upstreamHandler records what it receives and echoes it back, including
// the Authorization header, so redaction can be checked.
func (h *harness) upstreamHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.seen.add(seenReq{host: r.Host, path: r.URL.Path, query: r.URL.RawQuery, auth: r.Header.Get("Authorization"), body: string(body), proto: r.ProtoMajor,
			method: r.Method, header: r.Header.Clone(), trailer: r.Trailer.Clone()})
		w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
		w.Header().Set("X-Upstream-Proto", fmt.Sprint(r.ProtoMajor))
		fmt.Fprintf(w, "host=%s path=%s query=%s auth=%s body=%s", r.Host, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), body)
	})
	// /split writes the real secret in pieces, flushing in between.
	mux.HandleFunc("/split", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for _, part := range []string{"before ", ghValue[:3], ghValue[3:11], ghValue[11:], " middle ", aiValue[:1], aiValue[1:], " after"} {
			io.WriteString(w, part)
			rc.Flush()
			time.Sleep(2 * time.Millisecond)
		}
	})
	// /hdrname echoes a real value in a response header name.
	mux.HandleFunc("/hdrname", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-"+ghValue, "1")
		io.WriteString(w, "ok")
	})
	// /gzip2 sends the real value gzip-compressed twice, declared with two
	// Content-Encoding headers; /gzip1 once; /br claims brotli.
	mux.HandleFunc("/gzip", func(w http.ResponseWriter, r *http.Request) {
		layers, _ := strconv.Atoi(r.URL.Query().Get("layers"))
		data := []byte("echo " + ghValue + " end")
		for range layers {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(data)
			zw.Close()
			data = b.Bytes()
			w.Header().Add("Content-Encoding", "gzip")
		}
		if enc := r.URL.Query().Get("enc"); enc != "" {
			w.Header().Add("Content-Encoding", enc)
		}
		w.Write(data)
	})
	// /slow sends one line, waits for release (or the client to go), then
	// another.
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		http.NewResponseController(w).Flush()
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second\n")
	})
	// /hold sends nothing until release: the gateway waits for the
	// response head meanwhile.
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		h.held <- struct{}{}
		select {
		case <-h.release:
			io.WriteString(w, "held\n")
		case <-r.Context().Done():
			h.gone <- struct{}{}
		}
	})
	ws := func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "not a websocket", 400)
			return
		}
		h.seen.add(seenReq{host: r.Host, path: r.URL.Path, method: r.Method, header: r.Header.Clone(), proto: r.ProtoMajor})
		key := r.Header.Get("Sec-WebSocket-Key")
		sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		ext := ""
		if r.URL.Path == "/wsext" {
			// An upstream that negotiates compression nobody offered.
			ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n"
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n%s\r\n", base64.StdEncoding.EncodeToString(sum[:]), ext)
		brw.Flush()
		if r.URL.Path == "/wsleak" {
			// The upstream sends a real secret value in a frame.
			conn.Write([]byte("\x81\x1e" + ghValue))
		}
		// Echo raw bytes (frames are opaque to the relay).
		buf := make([]byte, 1024)
		for {
			n, err := brw.Read(buf)
			if n > 0 {
				conn.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	mux.HandleFunc("/ws", ws)
	mux.HandleFunc("/wsleak", ws)
	mux.HandleFunc("/wsext", ws)
	return mux
}

func (h *harness) gwPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(h.gwCA.Certificate())
	return p
}

func (h *harness) track(tr *http.Transport) *http.Transport {
	h.mu.Lock()
	h.clients = append(h.clients, tr)
	h.mu.Unlock()
	return tr
}

// client is an HTTP client using the explicit proxy.
func (h *harness) client(h2 bool) *http.Client {
	pu, _ := url.Parse("http://" + h.explicit.Addr().String())
	tr := h.track(&http.Transport{
		Proxy:             http.ProxyURL(pu),
		TLSClientConfig:   &tls.Config{RootCAs: h.gwPool()},
		ForceAttemptHTTP2: h2,
	})
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// transparentDial connects to the transparent listener announcing dst as
// the original destination, the way the sandbox forwarder does.
func (h *harness) transparentDial(dst netip.AddrPort) net.Conn {
	h.t.Helper()
	c, err := net.Dial("tcp", h.transparent.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	hdr, err := proxyproto.Append(nil, netip.MustParseAddrPort("127.0.0.1:40000"), dst)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := c.Write(hdr); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// transparentClient sends every request through the transparent listener
// with dst as the announced original destination (whatever the URL says).
func (h *harness) transparentClient(dst netip.AddrPort, h2 bool) *http.Client {
	tr := h.track(&http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return h.transparentDial(dst), nil
		},
		TLSClientConfig:   &tls.Config{RootCAs: h.gwPool()},
		ForceAttemptHTTP2: h2,
	})
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (h *harness) url(scheme, host, path string) string {
	port := h.upTLS.Port()
	if scheme == "http" {
		port = h.upPlain.Port()
	}
	return fmt.Sprintf("%s://%s:%d%s", scheme, host, port, path)
}

func (h *harness) env(name string) string { return h.sess.Load().Env()[name] }

// get performs a request and returns status and body ("" and status 0 on a
// transport error).
func get(t *testing.T, c *http.Client, method, u string, hdr http.Header, body io.Reader) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// rawConnect opens a CONNECT tunnel through the explicit proxy and returns
// the connection after a 200, or the status line.
func (h *harness) rawConnect(authority string) (net.Conn, *bufio.Reader, int) {
	h.t.Helper()
	c, err := net.Dial("tcp", h.explicit.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		c.Close()
		return nil, nil, 0
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, nil, resp.StatusCode
	}
	return c, br, 200
}

func (h *harness) receipt(fn func(receipts.Record) bool) receipts.Record {
	h.t.Helper()
	r, ok := h.sink.WaitFor(3*time.Second, fn)
	if !ok {
		h.t.Fatalf("no matching receipt among %d: %+v", len(h.sink.Records()), h.sink.Records())
	}
	return r
}

// noSecretsInReceipts checks that no receipt contains a real value or a
// placeholder.
func (h *harness) noSecretsInReceipts() {
	h.t.Helper()
	for _, r := range h.sink.Records() {
		s := strings.ToLower(fmt.Sprintf("%+v", r))
		for _, bad := range []string{ghValue, aiValue, h.env("GH_TOKEN"), h.env("AI_KEY")} {
			if bad != "" && strings.Contains(s, strings.ToLower(bad)) {
				h.t.Fatalf("receipt leaks a secret or placeholder: %s", s)
			}
		}
	}
}
