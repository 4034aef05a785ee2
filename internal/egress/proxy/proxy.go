// Package proxy is the egress gateway's data plane: the explicit proxy
// (HTTP CONNECT and absolute-form requests), the transparent listener (PROXY
// protocol v2 or SO_ORIGINAL_DST), TLS interception with leaf certificates
// from the gateway CA, HTTP/1.1 (intercepted connections on the gateway's
// own serving loop, h1serve.go), HTTP/2 and WebSocket forwarding, secret
// substitution and redaction, and the raw TCP relay for explicitly allowed
// host:port pairs.
//
// Decisions are made on names, never on the address a client chose: the SNI
// (TLS) or Host (plain HTTP) is the name, the Host header must agree with the
// SNI or CONNECT authority, and the gateway dials only addresses it resolved
// itself and the policy permits. Every decision produces one receipt.
//
// Like net/http/httputil.ReverseProxy, Proxy is configured through fields; a
// nil hook means the default.
package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"vak/internal/egress/asks"
	"vak/internal/egress/ca"
	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
	"vak/internal/receipts"
)

// Sink receives receipts. *receipts.Log implements it.
type Sink interface {
	// Append records one decision; an error means the log is broken.
	Append(receipts.Record) error
	// Err is non-nil once the log cannot record more: the proxy then
	// refuses traffic (fail closed).
	Err() error
}

// Limits bound what a client can make the gateway hold. Zero fields take
// the defaults below.
type Limits struct {
	MaxHeaderBytes        int
	ReadHeaderTimeout     time.Duration
	IdleTimeout           time.Duration
	DialTimeout           time.Duration
	TLSHandshakeTimeout   time.Duration
	ResponseHeaderTimeout time.Duration
	// PeekTimeout bounds the wait for a transparent or tunnelled client's
	// first bytes (to tell TLS, HTTP and other TCP apart).
	PeekTimeout time.Duration
}

// Default limits.
const (
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultDialTimeout       = 10 * time.Second
	DefaultTLSHandshake      = 10 * time.Second
	DefaultPeekTimeout       = 10 * time.Second
	// proxyHeaderTimeout bounds reading a PROXY v2 header.
	proxyHeaderTimeout = 5 * time.Second
)

// LoginHandler is the gateway's side of phantom login tokens
// (internal/egress/logins).
type LoginHandler interface {
	// TokenEndpoint names the login whose token endpoint a request to
	// host and path is, or "".
	TokenEndpoint(host policy.Host, path string) string
	// TokenResponse returns the body the sandbox gets for a token
	// endpoint's decoded response body; an error refuses the response.
	TokenResponse(login string, header http.Header, body []byte) ([]byte, error)
}

// Transparent listener modes.
type TransparentMode uint8

const (
	// ProxyProtocol requires a PROXY v2 header on every connection.
	ProxyProtocol TransparentMode = iota + 1
	// OriginalDst reads SO_ORIGINAL_DST (local nftables/iptables REDIRECT).
	OriginalDst
)

// Proxy is the gateway data plane. Set the fields, then call the Serve
// methods; fields must not change afterwards.
type Proxy struct {
	// Policy returns the current policy (required).
	Policy func() *policy.Policy
	// Secrets returns the current secrets session; nil means none.
	Secrets func() *secrets.Session
	// Logins rewrites the responses of login token endpoints (phantom
	// tokens); nil means no login is configured.
	Logins LoginHandler
	// CA mints interception certificates (required).
	CA *ca.Authority
	// Resolve resolves a normalised name; nil means the system resolver.
	Resolve func(ctx context.Context, name string) ([]netip.Addr, error)
	// NamesFor returns names the gateway's DNS server gave client for addr,
	// used for transparent connections that carry no name of their own.
	NamesFor func(client, addr netip.Addr) []string
	// Asks returns the registry that holds requests no rule allows until a
	// person answers (internal/egress/asks), or nil when such requests
	// are refused at once (network.ask off); nil means never.
	Asks func() *asks.Registry
	// Receipts records decisions; nil discards them.
	Receipts Sink
	// RootCAs verifies upstream certificates; nil means the system roots.
	RootCAs *x509.CertPool
	// DialContext dials a resolved "ip:port"; nil means a net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	Limits      Limits
	// Session names the session in receipts.
	Session string
	// Logf logs internal errors (never secrets); nil means log.Printf.
	Logf func(format string, args ...any)

	// testHookRequest, if set, runs at the start of every forwarded request
	// (tests use it to inject a panic, a fault that cannot be caused for real).
	testHookRequest func(*http.Request)
	// testH1Handler, if set, replaces serveInner in the HTTP/1 loop (the
	// parser fuzz target compares the loop with net/http's server).
	testH1Handler http.HandlerFunc

	initOnce sync.Once
	// baseCtx is the parent of the connections served by the HTTP/1 loop
	// (h1serve.go); Close cancels it.
	baseCtx    context.Context
	baseCancel context.CancelFunc
	// transport speaks HTTP/2 or HTTP/1.1 upstream (ALPN); transport1 only
	// HTTP/1.1. A request uses the protocol family its client used, as
	// mitmproxy does: HTTP/1 clients (and WebSocket upgrades) get HTTP/1.1
	// upstream, HTTP/2 clients get HTTP/2 where the server offers it.
	transport  *http.Transport
	transport1 *http.Transport
	// h1 pools the connections of the direct HTTP/1.1 path (h1upstream.go).
	h1       h1Pool
	inner    *http.Server
	innerQ   *queueListener
	tlsConns sync.Map // *tls.Conn -> *connInfo (HTTP/2 connections)
	nextID   atomic.Uint64
	wg       sync.WaitGroup
	closed   atomic.Bool

	mu        sync.Mutex
	flows     map[*flow]struct{}
	conns     map[net.Conn]struct{} // raw connections owned outside net/http
	listeners map[io.Closer]struct{}
	servers   []*http.Server

	stats struct {
		requests, denied, active atomic.Int64
	}
}

// Via values: how a connection reached the gateway.
const (
	ViaExplicit    = "explicit"
	ViaConnect     = "connect"
	ViaTransparent = "transparent"
)

// connInfo is what the gateway knows about one client connection.
type connInfo struct {
	id      uint64
	via     string
	client  netip.AddrPort
	origDst netip.AddrPort
	// bound is set when a CONNECT authority or the SNI fixed the
	// destination; requests on the connection must agree with host/port.
	bound bool
	host  policy.Host
	port  uint16
	tls   bool
	wc    *watchConn
	flow  *flow
}

type ctxKey struct{}

func ciFrom(ctx context.Context) *connInfo {
	ci, _ := ctx.Value(ctxKey{}).(*connInfo)
	return ci
}

func (p *Proxy) limits() Limits {
	l := p.Limits
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.DialTimeout == 0 {
		l.DialTimeout = DefaultDialTimeout
	}
	if l.TLSHandshakeTimeout == 0 {
		l.TLSHandshakeTimeout = DefaultTLSHandshake
	}
	if l.PeekTimeout == 0 {
		l.PeekTimeout = DefaultPeekTimeout
	}
	return l
}

// logf logs with every secret value and placeholder scrubbed (log lines
// can quote what the sandbox sent: a panic value, a host, a path).
func (p *Proxy) logf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if sess := p.secrets(); sess.Len() > 0 {
		msg = sess.Scrub(msg)
	}
	if p.Logf != nil {
		p.Logf("%s", msg)
		return
	}
	log.Printf("vak gateway: %s", msg)
}

func (p *Proxy) secrets() *secrets.Session {
	if p.Secrets == nil {
		return nil
	}
	return p.Secrets()
}

// errorLog adapts net/http's internal error logging (handler panics, TLS
// noise) to Logf.
type logWriter struct{ p *Proxy }

func (w logWriter) Write(b []byte) (int, error) {
	w.p.logf("%s", b)
	return len(b), nil
}

func (p *Proxy) init() {
	p.initOnce.Do(func() {
		lim := p.limits()
		p.baseCtx, p.baseCancel = context.WithCancel(context.Background())
		p.flows = map[*flow]struct{}{}
		p.conns = map[net.Conn]struct{}{}
		p.listeners = map[io.Closer]struct{}{}
		p.transport = &http.Transport{
			DialContext: p.dialUpstream,
			TLSClientConfig: &tls.Config{
				RootCAs:    p.RootCAs,
				MinVersion: tls.VersionTLS12,
			},
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           512,
			MaxIdleConnsPerHost:    64,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    lim.TLSHandshakeTimeout,
			ResponseHeaderTimeout:  lim.ResponseHeaderTimeout,
			ExpectContinueTimeout:  time.Second,
			MaxResponseHeaderBytes: int64(max(lim.MaxHeaderBytes, 1<<20)),
			// Never an environment proxy: the gateway is the way out.
			Proxy: nil,
		}
		p.transport1 = p.transport.Clone()
		p.transport1.ForceAttemptHTTP2 = false
		p.transport1.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		p.transport1.TLSClientConfig.NextProtos = []string{"http/1.1"}
		p.innerQ = newQueueListener()
		p.inner = &http.Server{
			Handler:           http.HandlerFunc(p.serveInner),
			MaxHeaderBytes:    lim.MaxHeaderBytes,
			ReadHeaderTimeout: lim.ReadHeaderTimeout,
			IdleTimeout:       lim.IdleTimeout,
			ConnContext:       p.connContext,
			ConnState:         p.connState,
			ErrorLog:          log.New(logWriter{p}, "", 0),
			// "OPTIONS *" is decided by the policy and receipted, not
			// answered by net/http.
			DisableGeneralOptionsHandler: true,
		}
		p.servers = append(p.servers, p.inner)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = p.inner.Serve(p.innerQ)
		}()
	})
}

func (p *Proxy) connContext(ctx context.Context, c net.Conn) context.Context {
	var ci *connInfo
	switch v := c.(type) {
	case *watchConn:
		ci = v.ci
	case *tls.Conn:
		if x, ok := p.tlsConns.Load(v); ok {
			ci = x.(*connInfo)
		}
	}
	if ci == nil {
		ci = &connInfo{id: p.nextID.Add(1), via: ViaExplicit}
	}
	return context.WithValue(ctx, ctxKey{}, ci)
}

func (p *Proxy) connState(c net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	var ci *connInfo
	switch v := c.(type) {
	case *watchConn:
		ci = v.ci
	case *tls.Conn:
		if x, ok := p.tlsConns.LoadAndDelete(v); ok {
			ci = x.(*connInfo)
		}
	}
	if ci != nil && ci.flow != nil && st == http.StateClosed {
		p.untrack(ci.flow)
	}
}

// flow is a live connection or request that Revoke re-decides.
type flow struct {
	req policy.Request
	// connLevel flows (intercepted connections, tunnels) are re-checked with
	// MayAllow: closed when no request to the destination could be allowed.
	connLevel bool
	// asked is set on a request a person allowed (no rule does): a revoke
	// ends it only when a rule now denies it.
	asked   bool
	revoked atomic.Bool
	rec     receipts.Record

	mu      sync.Mutex
	closers []func()
	closed  bool
	// upstream and client are the connections of a request on the direct
	// HTTP/1.1 path while it runs (h1upstream.go): closing them is how
	// the request is stopped, without a context of its own. client is
	// nil for requests served by net/http.
	upstream net.Conn
	client   net.Conn
}

// addCloser registers how to stop the flow; if the flow was already revoked
// it runs at once.
func (f *flow) addCloser(fn func()) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		fn()
		return
	}
	f.closers = append(f.closers, fn)
	f.mu.Unlock()
}

func (f *flow) closeAll() {
	f.mu.Lock()
	fns := f.closers
	f.closers = nil
	f.closed = true
	up, cl := f.upstream, f.client
	f.upstream, f.client = nil, nil
	f.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	if up != nil {
		_ = up.Close()
	}
	if cl != nil {
		_ = cl.Close()
	}
}

// setUpstream makes closeAll close c (the upstream connection of the
// request), and client, the client's connection, when not nil. It reports
// false, and sets nothing, when the flow was already closed: the caller
// closes c and gives up.
func (f *flow) setUpstream(c, client net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.upstream, f.client = c, client
	return true
}

// clearUpstream takes back what setUpstream set (the response is over). It
// reports false when closeAll has closed the connections meanwhile.
func (f *flow) clearUpstream() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.upstream, f.client = nil, nil
	return !f.closed
}

func (p *Proxy) track(f *flow) *flow {
	p.mu.Lock()
	p.flows[f] = struct{}{}
	p.mu.Unlock()
	p.stats.active.Add(1)
	return f
}

func (p *Proxy) untrack(f *flow) {
	p.mu.Lock()
	_, ok := p.flows[f]
	delete(p.flows, f)
	p.mu.Unlock()
	if ok {
		p.stats.active.Add(-1)
	}
}

func (p *Proxy) ownConn(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) releaseConn(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// asking is the asks registry when asking is on, else nil.
func (p *Proxy) asking() *asks.Registry {
	if p.Asks == nil {
		return nil
	}
	return p.Asks()
}

// Revoke re-decides every live connection and in-flight request under the
// current policy and closes those it no longer allows; it also drops idle
// upstream connections. It returns how many it closed.
func (p *Proxy) Revoke() int {
	p.init()
	pol := p.Policy()
	p.mu.Lock()
	var victims []*flow
	for f := range p.flows {
		var d policy.Decision
		if f.connLevel {
			d = pol.MayAllow(f.req)
		} else {
			d = pol.Decide(f.req)
		}
		// What a person allowed, and connections whose requests are asked
		// about one by one, stay unless a rule denies them.
		if !d.Allow && d.Rule == policy.NoRule && (f.asked || f.connLevel && p.asking() != nil) {
			continue
		}
		if !d.Allow {
			victims = append(victims, f)
			f.rec.Rule, f.rec.RuleName, f.rec.Reason = d.Rule, d.RuleName, "revoked: "+d.Reason
		}
	}
	p.mu.Unlock()
	// Every victim is marked before any is closed: closing a connection's
	// flow stops the request in flight on it too, which must then know
	// that it was revoked (not that its client went away).
	for _, f := range victims {
		f.revoked.Store(true)
	}
	for _, f := range victims {
		rec := f.rec
		rec.Decision = receipts.Deny
		rec.Time = time.Time{}
		p.emit(rec)
		f.closeAll()
	}
	p.transport.CloseIdleConnections()
	p.transport1.CloseIdleConnections()
	p.h1.closeIdle(false)
	return len(victims)
}

// PolicyChanged drops idle upstream connections (their addresses were
// permitted by the old policy) without touching live ones.
func (p *Proxy) PolicyChanged() {
	p.init()
	p.transport.CloseIdleConnections()
	p.transport1.CloseIdleConnections()
	p.h1.closeIdle(false)
}

// Stats are counters for status reports.
type Stats struct {
	Requests int64 `json:"requests"`
	Denied   int64 `json:"denied"`
	Active   int64 `json:"active"`
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	return Stats{Requests: p.stats.requests.Load(), Denied: p.stats.denied.Load(), Active: p.stats.active.Load()}
}

// Close stops all listeners, closes every connection and waits for the
// gateway's goroutines to finish.
func (p *Proxy) Close() error {
	p.init()
	p.mu.Lock()
	p.closed.Store(true)
	ls := p.listeners
	p.listeners = map[io.Closer]struct{}{}
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	servers := p.servers
	p.mu.Unlock()
	for l := range ls {
		_ = l.Close()
	}
	p.innerQ.Close()
	p.baseCancel()
	for _, s := range servers {
		_ = s.Close()
	}
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
	p.transport.CloseIdleConnections()
	p.transport1.CloseIdleConnections()
	p.h1.closeIdle(true)
	return nil
}

func (p *Proxy) addListener(l io.Closer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return net.ErrClosed
	}
	p.listeners[l] = struct{}{}
	return nil
}

// emit writes a receipt; failures are logged (the sink's Err makes the
// proxy refuse further traffic).
func (p *Proxy) emit(r receipts.Record) {
	// No secret value or placeholder is ever written: every field the
	// sandbox can influence (host, method, path, reason) is scrubbed.
	if sess := p.secrets(); sess.Len() > 0 {
		r = r.Scrub(sess.Scrub)
	}
	if r.Decision == receipts.Deny {
		p.stats.denied.Add(1)
	}
	if p.Receipts == nil {
		return
	}
	if err := p.Receipts.Append(r); err != nil {
		p.logf("receipt not recorded: %v", err)
	}
}

// receiptsBroken is non-nil when receipts can no longer be written.
func (p *Proxy) receiptsBroken() error {
	if p.Receipts == nil {
		return nil
	}
	if err := p.Receipts.Err(); err != nil {
		return fmt.Errorf("receipts log unavailable, refusing traffic: %w", err)
	}
	return nil
}

func (p *Proxy) baseRecord(ci *connInfo, proto string) receipts.Record {
	r := receipts.Record{Session: p.Session, Protocol: proto, Rule: policy.NoRule, Decision: receipts.Deny}
	if ci != nil && ci.client.IsValid() {
		r.Client = ci.client.String()
	}
	return r
}

// recoverConn turns a panic in one connection's goroutine into a log line
// and a closed connection, never a dead gateway.
func (p *Proxy) recoverConn(c net.Conn, what string) {
	if v := recover(); v != nil {
		if v == http.ErrAbortHandler {
			return
		}
		p.logf("panic in %s connection (closed): %v", what, v)
		if c != nil {
			_ = c.Close()
		}
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	switch v := a.(type) {
	case *net.TCPAddr:
		ap := v.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
