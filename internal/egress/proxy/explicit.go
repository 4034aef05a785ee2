package proxy

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"

	"vak/internal/egress/policy"
	"vak/internal/receipts"
)

// watchListener wraps accepted connections in watchConn.
type watchListener struct {
	net.Listener
	p *Proxy
}

func (l *watchListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ci := &connInfo{id: l.p.nextID.Add(1), via: ViaExplicit, client: addrPortOf(c.RemoteAddr())}
	wc := &watchConn{Conn: c, ci: ci, onReject: l.p.rejected}
	ci.wc = wc
	return wc, nil
}

// rejected records a request net/http refused before any handler saw it.
func (p *Proxy) rejected(ci *connInfo, status int) {
	proto := "http"
	if ci.tls {
		proto = "https"
	}
	rec := p.baseRecord(ci, proto)
	if ci.bound {
		rec.Host, rec.Port = ci.host.String(), ci.port
	}
	rec.Status = status
	rec.Reason = fmt.Sprintf("malformed request refused by the HTTP parser (%d)", status)
	p.emit(rec)
}

// ServeExplicit serves the explicit proxy on l (HTTP CONNECT and
// absolute-form requests, for clients that honour HTTPS_PROXY/HTTP_PROXY).
// It returns when l is closed or the proxy is closed.
func (p *Proxy) ServeExplicit(l net.Listener) error {
	p.init()
	lim := p.limits()
	srv := &http.Server{
		Handler:           http.HandlerFunc(p.serveExplicit),
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		ConnContext:       p.connContext,
		ErrorLog:          log.New(logWriter{p}, "", 0),
		// "OPTIONS *" gets a decision and a receipt like any request.
		DisableGeneralOptionsHandler: true,
	}
	srv.SetKeepAlivesEnabled(true)
	var prot http.Protocols
	prot.SetHTTP1(true)
	srv.Protocols = &prot
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		return net.ErrClosed
	}
	p.servers = append(p.servers, srv)
	p.mu.Unlock()
	p.wg.Add(1)
	defer p.wg.Done()
	err := srv.Serve(&watchListener{Listener: l, p: p})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (p *Proxy) serveExplicit(w http.ResponseWriter, r *http.Request) {
	ci := ciFrom(r.Context())
	cw := &countingWriter{ResponseWriter: w, wc: ci.wc}
	if r.Method == http.MethodConnect {
		p.handleConnect(cw, r, ci)
		return
	}
	if !r.URL.IsAbs() || (r.URL.Scheme != "http" && r.URL.Scheme != "https") {
		rec := p.baseRecord(ci, "http")
		rec.Method = r.Method
		rec.Status = http.StatusBadRequest
		rec.Reason = "not a proxy request (want CONNECT or an absolute http(s) URL)"
		p.emit(rec)
		writeDenied(cw, http.StatusBadRequest, rec.Reason)
		return
	}
	def := uint16(80)
	if r.URL.Scheme == "https" {
		def = 443
	}
	h, port, err := policy.ParseAuthority(r.URL.Host, def)
	if err != nil {
		rec := p.baseRecord(ci, r.URL.Scheme)
		rec.Method = r.Method
		rec.Status = http.StatusBadRequest
		rec.Reason = "bad request authority: " + err.Error()
		p.emit(rec)
		writeDenied(cw, http.StatusBadRequest, rec.Reason)
		return
	}
	p.forward(cw, r, ci, target{scheme: r.URL.Scheme, host: h, port: port})
}

// handleConnect decides a CONNECT and turns the connection into a tunnel.
func (p *Proxy) handleConnect(w *countingWriter, r *http.Request, ci *connInfo) {
	rec := p.baseRecord(ci, "connect")
	rec.Method = http.MethodConnect
	deny := func(status int, reason string) {
		rec.Status = status
		rec.Reason = reason
		p.emit(rec)
		writeDenied(w, status, reason)
	}
	if err := p.receiptsBroken(); err != nil {
		deny(http.StatusServiceUnavailable, err.Error())
		return
	}
	h, port, err := policy.ParseAuthority(r.RequestURI, 0)
	if err != nil {
		deny(http.StatusBadRequest, "bad CONNECT authority: "+err.Error())
		return
	}
	rec.Host, rec.Port = h.String(), port
	if err := p.secrets().CheckName(h.Name); err != nil {
		deny(http.StatusForbidden, err.Error())
		return
	}
	pol := p.Policy()
	d := pol.MayAllow(policy.Request{Proto: policy.ProtoHTTP, Host: h, Port: port})
	if !d.Allow {
		if td := pol.Decide(policy.Request{Proto: policy.ProtoTCP, Host: h, Port: port}); td.Allow {
			d = td
		}
	}
	rec.Rule, rec.RuleName = d.Rule, d.RuleName
	if !d.Allow && d.Rule == policy.NoRule && p.asking() != nil {
		// Asking is on: the tunnel opens and each of its requests is
		// decided, and asked about, on its own.
		d.Allow, d.Reason = true, d.Reason+"; asking is on"
	}
	if !d.Allow {
		deny(http.StatusForbidden, d.Reason)
		return
	}
	hj, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		deny(http.StatusInternalServerError, "connection cannot be hijacked")
		return
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		p.logf("hijack: %v", err)
		return
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		return
	}
	rec.Decision = receipts.Allow
	rec.Status = http.StatusOK
	rec.Reason = d.Reason + "; tunnel opened, requests are decided one by one"
	p.emit(rec)
	raw := conn
	if wc, ok := conn.(*watchConn); ok {
		raw = wc.Conn
	}
	tc := withPrefix(raw, nil, brw.Reader)
	tci := &connInfo{id: p.nextID.Add(1), via: ViaConnect, client: ci.client, bound: true, host: h, port: port}
	if !p.ownConn(raw) {
		raw.Close()
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.recoverConn(raw, "CONNECT")
		p.tunnel(context.Background(), tc, raw, tci)
	}()
}

// writeDenied writes a plain-text refusal.
func writeDenied(w http.ResponseWriter, status int, reason string) {
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Vak-Gateway", "deny")
	w.WriteHeader(status)
	fmt.Fprintf(w, "vak gateway: %d %s: %s\n", status, http.StatusText(status), reason)
}
