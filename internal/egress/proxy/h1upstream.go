package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"vak/internal/egress/policy"
)

// The direct HTTP/1.1 upstream path. net/http's Transport writes every
// request on a per-connection write goroutine and reads every response on a
// per-connection read goroutine, so one keep-alive request crosses three
// goroutines in the gateway (plus the response body's EOF hand-back). On a
// small machine each hand-off between OS threads costs tens of microseconds,
// which is most of what the gateway adds to a request at concurrency 1.
// Idempotent requests that carry no body (GET, HEAD, DELETE, ...: nothing
// has to be written while the response is read) are therefore written and read on
// the handler's own goroutine over a pooled connection. Requests with a
// body, WebSocket upgrades, "Expect" and HTTP/2 keep using the Transport.
// Dialling goes through the same policy-checked dialUpstream and the same
// TLS verification; the pool is dropped with the Transport's idle
// connections (PolicyChanged, Revoke, Close).

// h1Pool holds idle upstream connections by scheme and authority.
type h1Pool struct {
	mu     sync.Mutex
	gen    uint64 // bumped by closeIdle: older connections are not reused
	closed bool
	idle   map[h1Key][]*h1Conn
}

// h1Key names the destination of a pooled connection (a struct of the
// request's own strings: no key is built per request).
type h1Key struct{ scheme, authority string }

// h1MaxIdlePerKey matches the Transport's MaxIdleConnsPerHost.
const h1MaxIdlePerKey = 64

// h1Conn is one upstream connection.
type h1Conn struct {
	key  h1Key
	gen  uint64
	conn net.Conn
	lr   *limitReader
	br   *bufio.Reader
	bw   *bufio.Writer
}

// limitReader bounds the bytes read from the connection while a response
// head is parsed (MaxResponseHeaderBytes), and counts what was read.
type limitReader struct {
	r     io.Reader
	limit int64 // < 0: unlimited
	n     int64
}

var errResponseHeaderTooLong = errors.New("upstream response headers too long")

func (l *limitReader) Read(b []byte) (int, error) {
	if l.limit == 0 {
		return 0, errResponseHeaderTooLong
	}
	if l.limit > 0 && int64(len(b)) > l.limit {
		b = b[:l.limit]
	}
	n, err := l.r.Read(b)
	l.n += int64(n)
	if l.limit > 0 {
		l.limit -= int64(n)
	}
	return n, err
}

func (h *h1Pool) get(key h1Key) *h1Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.idle[key]
	if len(l) == 0 {
		return nil
	}
	c := l[len(l)-1]
	l[len(l)-1] = nil
	h.idle[key] = l[:len(l)-1]
	return c
}

func (h *h1Pool) generation() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

// put keeps c for reuse unless the pool was emptied since c was dialled.
func (h *h1Pool) put(c *h1Conn) {
	h.mu.Lock()
	if h.closed || c.gen != h.gen || len(h.idle[c.key]) >= h1MaxIdlePerKey {
		h.mu.Unlock()
		c.conn.Close()
		return
	}
	if h.idle == nil {
		h.idle = map[h1Key][]*h1Conn{}
	}
	h.idle[c.key] = append(h.idle[c.key], c)
	h.mu.Unlock()
}

// closeIdle closes every idle connection; connections in use are closed
// when their response ends instead of being returned. With final set the
// pool keeps nothing afterwards.
func (h *h1Pool) closeIdle(final bool) {
	h.mu.Lock()
	idle := h.idle
	h.idle = nil
	h.gen++
	if final {
		h.closed = true
	}
	h.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.conn.Close()
		}
	}
}

// directEligible reports whether outreq can take the direct HTTP/1.1 path:
// no body, no upgrade, and idempotent, so that a pooled connection the
// server closed while idle can be replaced by sending the request again
// (the Transport notices such a close on its read goroutine beforehand).
func directEligible(outreq *http.Request, ws bool) bool {
	return !ws && outreq.Body == nil && outreq.ContentLength == 0 && len(outreq.Trailer) == 0 &&
		outreq.Header.Get("Expect") == "" && idempotent(outreq)
}

// idempotent reports whether a request may be sent again after a reused
// connection turned out to be closed by the server (the Transport's rule).
func idempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodDelete, http.MethodPut:
		return true
	}
	return r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != ""
}

// dialH1 opens a connection to t through the policy-checked dialer, with
// TLS verified like the Transport's for https.
func (p *Proxy) dialH1(ctx context.Context, key h1Key, t target, gen uint64) (*h1Conn, error) {
	lim := p.limits()
	addr := net.JoinHostPort(hostLiteralBare(t.host), strconv.Itoa(int(t.port)))
	dctx, cancel := context.WithTimeout(ctx, lim.DialTimeout)
	c, err := p.dialUpstream(dctx, "tcp", addr)
	cancel()
	if err != nil {
		return nil, err
	}
	if t.scheme == "https" {
		cfg := p.transport1.TLSClientConfig.Clone()
		cfg.ServerName = hostLiteralBare(t.host)
		tc := tls.Client(c, cfg)
		hctx, cancel := context.WithTimeout(ctx, lim.TLSHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	lr := &limitReader{r: c, limit: -1}
	return &h1Conn{key: key, gen: gen, conn: c, lr: lr, br: bufio.NewReaderSize(lr, 4096), bw: bufio.NewWriterSize(c, 4096)}, nil
}

// hostLiteralBare is h without IPv6 brackets (for JoinHostPort and SNI).
func hostLiteralBare(h policy.Host) string {
	if h.IsIP() {
		return h.Addr.String()
	}
	return h.Name
}

// roundTripDirect sends outreq (no body) to t over a pooled HTTP/1.1
// connection and reads the response head on the calling goroutine. The
// response body returns the connection to the pool when read to its end.
// The request is stopped (revoke, client gone, Close) by f.closeAll, which
// closes the upstream connection (and client, the client's connection, when
// not nil): that ends a blocked write or read without a context per
// request. outreq's context (the client connection's) bounds the dial.
func (p *Proxy) roundTripDirect(outreq *http.Request, t target, f *flow, client net.Conn) (*http.Response, error) {
	ctx := outreq.Context()
	key := h1Key{t.scheme, outreq.URL.Host}
	lim := p.limits()
	maxHead := int64(max(lim.MaxHeaderBytes, 1<<20))
	for attempt := 0; ; attempt++ {
		pc := p.h1.get(key)
		reused := pc != nil
		if pc == nil {
			var err error
			if pc, err = p.dialH1(ctx, key, t, p.h1.generation()); err != nil {
				return nil, err
			}
		}
		if !f.setUpstream(pc.conn, client) {
			pc.conn.Close()
			return nil, errFlowClosed
		}
		resp, err := pc.exchange(outreq, lim.ResponseHeaderTimeout, maxHead)
		if err != nil {
			stopped := !f.clearUpstream()
			pc.conn.Close()
			if stopped {
				return nil, errFlowClosed
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// A reused connection the server closed while idle: send once
			// more on a fresh one if nothing came back (only idempotent
			// requests take this path).
			if reused && attempt == 0 && pc.lr.n == 0 {
				continue
			}
			return nil, err
		}
		resp.Body = &h1Body{rc: resp.Body, pc: pc, pool: &p.h1, f: f, reuse: !resp.Close && !outreq.Close && resp.StatusCode != http.StatusSwitchingProtocols}
		return resp, nil
	}
}

// errFlowClosed ends a direct request whose flow was closed (revoked, or
// its client went away).
var errFlowClosed = errors.New("request stopped (revoked or the client went away)")

// exchange writes req and reads the final response head (skipping 1xx
// informational responses other than 101).
func (pc *h1Conn) exchange(req *http.Request, headerTimeout time.Duration, maxHead int64) (*http.Response, error) {
	pc.lr.n = 0
	if err := req.Write(pc.bw); err != nil {
		return nil, err
	}
	if err := pc.bw.Flush(); err != nil {
		return nil, err
	}
	if headerTimeout > 0 {
		_ = pc.conn.SetReadDeadline(time.Now().Add(headerTimeout))
	}
	for range 6 {
		pc.lr.limit = maxHead
		resp, err := http.ReadResponse(pc.br, req)
		pc.lr.limit = -1
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, fmt.Errorf("timeout awaiting response headers: %w", err)
			}
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		if headerTimeout > 0 {
			_ = pc.conn.SetReadDeadline(time.Time{})
		}
		return resp, nil
	}
	return nil, errors.New("upstream sent too many informational (1xx) responses")
}

// h1Body is a direct response's body: read to its end (trailers included),
// it hands the connection back to the pool; closed early, it closes it.
type h1Body struct {
	rc    io.ReadCloser
	pc    *h1Conn
	pool  *h1Pool
	f     *flow
	reuse bool
	done  bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
		if err == io.EOF {
			return n, io.EOF
		}
	}
	return n, err
}

func (b *h1Body) finish(complete bool) {
	if b.done {
		return
	}
	b.done = true
	// clearUpstream reports false when the request was stopped and the
	// connection already closed.
	if b.f.clearUpstream() && complete && b.reuse {
		b.pool.put(b.pc)
		return
	}
	b.pc.conn.Close()
}

// Close never drains: an unread rest closes the connection.
func (b *h1Body) Close() error {
	b.finish(false)
	return nil
}
