package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"vak/internal/egress/origdst"
	"vak/internal/egress/policy"
	"vak/internal/egress/proxyproto"
	"vak/internal/egress/secrets"
	"vak/internal/receipts"
)

// ServeTransparent serves connections whose original destination comes
// from a PROXY v2 header (mode ProxyProtocol, the sandbox forwarder) or from
// SO_ORIGINAL_DST (mode OriginalDst, a local REDIRECT). It returns when l or
// the proxy is closed.
func (p *Proxy) ServeTransparent(l net.Listener, mode TransparentMode) error {
	p.init()
	if mode != ProxyProtocol && mode != OriginalDst {
		return fmt.Errorf("proxy: unknown transparent mode %d", mode)
	}
	if err := p.addListener(l); err != nil {
		return err
	}
	p.wg.Add(1)
	defer p.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.closed.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// Out of file descriptors and similar: back off, keep serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.logf("transparent accept: %v (retrying in %v)", err, backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if !p.ownConn(c) {
			c.Close()
			return nil
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.recoverConn(c, "transparent")
			p.serveTransparentConn(c, mode)
		}()
	}
}

func (p *Proxy) serveTransparentConn(c net.Conn, mode TransparentMode) {
	ci := &connInfo{id: p.nextID.Add(1), via: ViaTransparent, client: addrPortOf(c.RemoteAddr())}
	refuse := func(reason string) {
		rec := p.baseRecord(ci, "tcp")
		rec.Reason = reason
		p.emit(rec)
		c.Close()
		p.releaseConn(c)
	}
	switch mode {
	case ProxyProtocol:
		_ = c.SetReadDeadline(time.Now().Add(proxyHeaderTimeout))
		h, err := proxyproto.Read(c)
		_ = c.SetReadDeadline(time.Time{})
		if err != nil {
			refuse("bad or missing PROXY v2 header: " + err.Error())
			return
		}
		ci.client, ci.origDst = h.Source, h.Destination
	case OriginalDst:
		ap, err := origdst.Lookup(c)
		if err != nil {
			refuse("no original destination: " + err.Error())
			return
		}
		ci.origDst = ap
	}
	ci.port = ci.origDst.Port()
	p.tunnel(context.Background(), c, c, ci)
}

// tunnel handles a stream whose destination port is known (CONNECT tunnel or
// transparent connection): raw TCP when a tcp rule allows the name, else it
// sniffs TLS (intercepted) or plain HTTP, and refuses anything else.
func (p *Proxy) tunnel(ctx context.Context, c, raw net.Conn, ci *connInfo) {
	handedOff := false
	defer func() {
		if !handedOff {
			raw.Close()
		}
		p.releaseConn(raw)
	}()
	pol := p.Policy()
	tcpReq := func(h policy.Host) policy.Request {
		return policy.Request{Proto: policy.ProtoTCP, Host: h, Port: ci.port}
	}
	if err := p.receiptsBroken(); err != nil {
		rec := p.baseRecord(ci, "tcp")
		rec.Reason = err.Error()
		p.emit(rec)
		return
	}
	// Non-HTTP TCP allowed by name: relay without looking at the bytes
	// (server-speaks-first protocols send nothing to sniff).
	if ci.bound {
		if d := pol.Decide(tcpReq(ci.host)); d.Allow {
			p.relayTCP(ctx, c, raw, ci, ci.host, d, "tcp")
			return
		}
	} else if p.NamesFor != nil && ci.origDst.IsValid() {
		for _, n := range p.NamesFor(ci.client.Addr(), ci.origDst.Addr()) {
			h := policy.Host{Name: n}
			if d := pol.Decide(tcpReq(h)); d.Allow {
				p.relayTCP(ctx, c, raw, ci, h, d, "tcp")
				return
			}
		}
	}
	lim := p.limits()
	_ = raw.SetReadDeadline(time.Now().Add(lim.PeekTimeout))
	br := bufio.NewReaderSize(c, 4096)
	first, err := br.Peek(1)
	if err != nil {
		p.refuseTCP(ci, fmt.Sprintf("no TLS or HTTP within %v and no tcp rule allows the destination", lim.PeekTimeout))
		return
	}
	switch {
	case first[0] == 0x16: // TLS handshake record
		hello, rec, err := readClientHello(br)
		_ = raw.SetReadDeadline(time.Time{})
		if err != nil {
			r := p.baseRecord(ci, "tls")
			r.Reason = "malformed TLS ClientHello: " + err.Error()
			if ci.bound {
				r.Host, r.Port = ci.host.String(), ci.port
			}
			p.emit(r)
			return
		}
		handedOff = p.handleTLS(ctx, withPrefix(c, rec, br), raw, ci, hello)
	case looksLikeHTTP(br):
		_ = raw.SetReadDeadline(time.Time{})
		handedOff = p.serveHTTPConn(withPrefix(c, nil, br), raw, ci, nil)
	default:
		_ = raw.SetReadDeadline(time.Time{})
		p.refuseTCP(ci, "not TLS or HTTP, and no tcp rule allows the destination")
	}
}

func (p *Proxy) refuseTCP(ci *connInfo, reason string) {
	rec := p.baseRecord(ci, "tcp")
	if ci.bound {
		rec.Host = ci.host.String()
	} else if ci.origDst.IsValid() {
		rec.Host = ci.origDst.Addr().String()
	}
	rec.Port = ci.port
	d := p.Policy().Decide(policy.Request{Proto: policy.ProtoTCP, Host: ci.host, Port: ci.port})
	rec.Reason = reason
	if ci.bound {
		rec.Reason += " (" + d.Reason + ")"
	}
	p.emit(rec)
}

// looksLikeHTTP reports whether the stream starts with an HTTP/1 request
// line ("METHOD ").
func looksLikeHTTP(br *bufio.Reader) bool {
	b, _ := br.Peek(8)
	for i, c := range b {
		if c == ' ' {
			return i >= 3
		}
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return false
}

// handleTLS decides on the SNI and either intercepts the connection or, when
// a tcp rule allows the name, relays it untouched. It reports whether the
// connection was handed to the HTTP server.
func (p *Proxy) handleTLS(ctx context.Context, c, raw net.Conn, ci *connInfo, hello *tls.ClientHelloInfo) bool {
	deny := func(h string, reason string) {
		rec := p.baseRecord(ci, "tls")
		rec.Host, rec.Port = h, ci.port
		rec.Reason = reason
		p.emit(rec)
	}
	var h policy.Host
	switch {
	case hello.ServerName != "":
		nh, err := policy.NormalizeHost(hello.ServerName)
		if err != nil {
			deny("", "malformed SNI: "+err.Error())
			return false
		}
		h = nh
		if err := p.secrets().CheckName(h.Name); err != nil {
			deny(h.String(), "SNI refused: "+err.Error())
			return false
		}
		if ci.bound && h != ci.host {
			deny(h.String(), fmt.Sprintf("SNI %s does not match the CONNECT authority %s", h, ci.host))
			return false
		}
	case ci.bound:
		h = ci.host
	case ci.origDst.IsValid():
		// No name at all: only an IP rule (CIDR) can allow this.
		h = policy.Host{Addr: ci.origDst.Addr()}
	default:
		deny("", "TLS without SNI and no destination")
		return false
	}
	if !ci.bound {
		if d := p.Policy().Decide(policy.Request{Proto: policy.ProtoTCP, Host: h, Port: ci.port}); d.Allow {
			p.relayTCP(ctx, c, raw, ci, h, d, "tls-passthrough")
			return false
		}
	}
	cert, err := p.CA.Leaf(h.String())
	if err != nil {
		deny(h.String(), "cannot mint certificate: "+err.Error())
		return false
	}
	ci.bound, ci.host, ci.tls = true, h, true
	lim := p.limits()
	tc := tls.Server(c, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	hctx, cancel := context.WithTimeout(ctx, lim.TLSHandshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		deny(h.String(), "TLS handshake with the client failed (does it trust the vak gateway CA?): "+err.Error())
		return false
	}
	return p.serveHTTPConn(tc, raw, ci, tc)
}

// serveHTTPConn serves an intercepted connection: HTTP/2 (negotiated on
// tc) through the inner net/http server, HTTP/1.x on the calling goroutine
// (serveH1). It reports whether the connection was handed off (the caller
// must not close it).
func (p *Proxy) serveHTTPConn(c, raw net.Conn, ci *connInfo, tc *tls.Conn) bool {
	if ci.bound {
		proto := "http"
		if ci.tls {
			proto = "https"
		}
		f := &flow{connLevel: true, req: policy.Request{Proto: policy.ProtoHTTP, Host: ci.host, Port: ci.port}}
		f.rec = p.baseRecord(ci, proto)
		f.rec.Host, f.rec.Port = ci.host.String(), ci.port
		f.addCloser(func() { raw.Close() })
		ci.flow = p.track(f)
	}
	if tc == nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		// HTTP/1.x: served on this goroutine (h1serve.go); the caller
		// closes the connection afterwards.
		p.serveH1(c, raw, ci, tc)
		return false
	}
	p.tlsConns.Store(tc, ci)
	if err := p.innerQ.push(tc); err != nil {
		p.tlsConns.Delete(tc)
		if ci.flow != nil {
			p.untrack(ci.flow)
		}
		return false
	}
	return true
}

// relayTCP relays an allowed non-HTTP stream to the gateway-resolved
// destination. Real secret values coming back cut the stream; placeholders
// going out are substituted only where a secret allows body injection to the
// host, and block the stream otherwise.
func (p *Proxy) relayTCP(ctx context.Context, c, raw net.Conn, ci *connInfo, h policy.Host, d policy.Decision, proto string) {
	rec := p.baseRecord(ci, proto)
	rec.Host, rec.Port = h.String(), ci.port
	rec.Rule, rec.RuleName = d.Rule, d.RuleName
	lim := p.limits()
	dctx, cancel := context.WithTimeout(ctx, lim.DialTimeout)
	up, err := p.dialHost(dctx, h, ci.port)
	cancel()
	if err != nil {
		rec.Reason = d.Reason + "; " + err.Error()
		var dd *DialDeniedError
		if !errors.As(err, &dd) {
			rec.Decision = receipts.Allow
			rec.Reason = d.Reason + "; upstream unreachable: " + err.Error()
		}
		p.emit(rec)
		return
	}
	if !p.ownConn(up) {
		up.Close()
		return
	}
	defer p.releaseConn(up)
	defer up.Close()
	f := &flow{req: policy.Request{Proto: policy.ProtoTCP, Host: h, Port: ci.port}, rec: rec}
	f.addCloser(func() { raw.Close(); up.Close() })
	p.track(f)
	defer p.untrack(f)

	var toUp io.Reader = c
	var toClient io.Reader = up
	if sess := p.secrets(); sess.Len() > 0 {
		var stopUp, stopClient func()
		toUp, stopUp = sess.InteractiveRequest(h, c, false)
		toClient, stopClient = sess.InteractiveGuard(up)
		defer stopUp()
		defer stopClient()
	}
	type result struct {
		n   int64
		err error
	}
	outc := make(chan result, 1)
	go func() {
		n, err := io.Copy(up, toUp)
		if err != nil {
			up.Close()
			raw.Close()
		} else {
			closeWrite(up)
		}
		outc <- result{n, err}
	}()
	in, inErr := io.Copy(raw, toClient)
	if inErr != nil {
		raw.Close()
		up.Close()
	} else {
		closeWrite(raw)
	}
	var out result
	select {
	case out = <-outc:
	case <-time.After(lim.IdleTimeout):
		raw.Close()
		up.Close()
		out = <-outc
	}
	rec.Decision = receipts.Allow
	rec.BytesOut, rec.BytesIn = out.n, in
	rec.Reason = d.Reason
	switch {
	case f.revoked.Load():
		rec.Reason += "; closed by revoke"
	case errors.Is(inErr, secrets.ErrInResponse):
		rec.Reason += "; cut: a secret value appeared in the response stream"
	case errors.Is(out.err, secrets.ErrBlocked):
		rec.Reason += "; cut: " + blockedReason(out.err)
	}
	p.emit(rec)
}
