package proxy

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
	"vak/internal/receipts"
)

// target is a decided destination.
type target struct {
	scheme string
	host   policy.Host
	port   uint16
}

// serveInner handles requests on intercepted TLS connections, CONNECT
// tunnels carrying plain HTTP, and transparent plain HTTP. The name is the
// Host header (":authority" in HTTP/2); when the connection is bound (SNI or
// CONNECT), Host must name the same host and port, else 421.
func (p *Proxy) serveInner(w http.ResponseWriter, r *http.Request) {
	ci := ciFrom(r.Context())
	var cw *countingWriter
	if hw, ok := w.(*h1Response); ok {
		// The HTTP/1 loop serves one request at a time: its connection
		// keeps one countingWriter for all of them.
		cw = &hw.s.cw
		*cw = countingWriter{ResponseWriter: w, wc: ci.wc}
	} else {
		cw = &countingWriter{ResponseWriter: w, wc: ci.wc}
	}
	scheme := "http"
	if ci.tls {
		scheme = "https"
	}
	t := target{scheme: scheme}
	reject := func(status int, reason string) {
		rec := p.baseRecord(ci, scheme)
		rec.Method = r.Method
		if ci.bound {
			rec.Host, rec.Port = ci.host.String(), ci.port
		}
		rec.Status, rec.Reason = status, reason
		p.emit(rec)
		writeDenied(cw, status, reason)
	}
	if r.Host == "" {
		if !ci.bound {
			reject(http.StatusBadRequest, "Host header required")
			return
		}
		t.host, t.port = ci.host, ci.port
	} else {
		h, port, err := policy.ParseAuthority(r.Host, ci.port)
		if err != nil {
			reject(http.StatusBadRequest, "bad Host header: "+err.Error())
			return
		}
		if ci.bound && (h != ci.host || port != ci.port) {
			what := "SNI"
			if !ci.tls {
				what = "CONNECT authority"
			}
			reject(http.StatusMisdirectedRequest, fmt.Sprintf("Host %s does not match the %s %s", policy.FormatAuthority(h, port), what, policy.FormatAuthority(ci.host, ci.port)))
			return
		}
		if !ci.bound && ci.port != 0 && port != ci.port {
			reject(http.StatusMisdirectedRequest, fmt.Sprintf("Host port %d does not match the destination port %d", port, ci.port))
			return
		}
		t.host, t.port = h, port
	}
	p.forward(cw, r, ci, t)
}

// hopHeaders are removed when forwarding (RFC 9110 7.6.1), plus the proxy
// credentials, which are for the gateway only.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopByHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

func isWebSocket(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), "websocket")
}

func headerHasToken(h http.Header, key, tok string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), tok) {
				return true
			}
		}
	}
	return false
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// countReader counts bytes read from a request body.
type countReader struct {
	r   io.Reader
	n   int64
	err error // first error other than EOF
	mu  sync.Mutex
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.mu.Lock()
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	return n, err
}

func (c *countReader) result() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.err
}

type bodyCloser struct {
	io.Reader
	c io.Closer
}

func (b bodyCloser) Close() error { return b.c.Close() }

// forward decides one HTTP request and, if allowed, sends it upstream and
// streams the (redacted) response back. It writes exactly one receipt.
func (p *Proxy) forward(w *countingWriter, r *http.Request, ci *connInfo, t target) {
	p.stats.requests.Add(1)
	ws := isWebSocket(r)
	proto := t.scheme
	if ws {
		proto = map[string]string{"http": "ws", "https": "wss"}[t.scheme]
	}
	sess := p.secrets()
	rec := p.baseRecord(ci, proto)
	rec.Method = r.Method
	rec.Host, rec.Port = t.host.String(), t.port
	rec.Path = sess.Scrub(r.URL.Path)
	emitted := false
	emit := func() {
		if !emitted {
			emitted = true
			p.emit(rec)
		}
	}
	deny := func(status int, reason string) {
		rec.Decision = receipts.Deny
		rec.Status, rec.Reason = status, reason
		emit()
		writeDenied(w, status, reason)
	}
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				p.logf("panic while forwarding to %s (connection closed, gateway unaffected): %v", rec.Host, v)
				rec.Decision = receipts.Deny
				rec.Reason = "internal error: the request was aborted"
			}
			emit()
			panic(http.ErrAbortHandler)
		}
	}()
	if p.testHookRequest != nil {
		p.testHookRequest(r)
	}
	if err := p.receiptsBroken(); err != nil {
		deny(http.StatusServiceUnavailable, err.Error())
		return
	}
	// "OPTIONS *" (the server itself, not a resource) is decided like any
	// request, with the path "*", which only rules without paths match.
	asterisk := r.Method == http.MethodOptions && r.URL.Path == "*" && r.URL.RawQuery == ""
	if !asterisk {
		if err := policy.CanonicalPath(r.URL.Path); err != nil {
			deny(http.StatusBadRequest, err.Error())
			return
		}
	}
	// Names travel in the clear (DNS, SNI) and are never substituted.
	if err := sess.CheckName(t.host.Name); err != nil {
		deny(http.StatusForbidden, err.Error())
		return
	}
	// Other upgrades (h2c, ...) are optional for the server: the Upgrade
	// header is dropped with the other hop-by-hop headers below.
	if ws && r.ProtoMajor != 1 {
		deny(http.StatusBadRequest, "WebSocket over HTTP/2 is not supported")
		return
	}
	preq := policy.Request{Proto: policy.ProtoHTTP, Host: t.host, Port: t.port, Method: r.Method, Path: r.URL.Path, WebSocket: ws}
	d := p.Policy().Decide(preq)
	rec.Rule, rec.RuleName = d.Rule, d.RuleName
	if !d.Allow {
		rec.Decision = receipts.Deny
		rec.Status, rec.Reason = http.StatusForbidden, d.Reason
		emit()
		// The refusal names the host and the rule, so that a user who sees
		// it in a client's output knows it is vak's policy speaking.
		writeDenied(w, http.StatusForbidden, fmt.Sprintf("%s %s:%d: %s (see the [network] rules of the user config)", r.Method, t.host, t.port, d.Reason))
		return
	}

	// Keep "trailers" in TE for gRPC; everything else in TE is hop-by-hop.
	keepTE := headerHasToken(r.Header, "Te", "trailers")
	// A shallow copy: the outgoing request takes over the incoming one's
	// header map (rewritten in place below; nothing reads the incoming
	// headers after this point, and the servers decided the connection's
	// fate, Connection: close included, when they read the request).
	outreq := r.WithContext(r.Context())
	outreq.RequestURI = ""
	outreq.URL = &url.URL{
		Scheme:   t.scheme,
		Host:     policy.URLHost(t.host, t.port, t.scheme),
		Path:     r.URL.Path,
		RawPath:  r.URL.RawPath,
		RawQuery: r.URL.RawQuery,
		// Checked by RewriteRequest, then dropped: URL user information is
		// never forwarded.
		User: r.URL.User,
	}
	if asterisk {
		outreq.URL.Path, outreq.URL.Opaque = "", "*"
	}
	outreq.Host = ""
	outreq.Close = false
	outreq.Proto, outreq.ProtoMajor, outreq.ProtoMinor = "HTTP/1.1", 1, 1
	removeHopByHop(outreq.Header)
	if ws {
		outreq.Header.Set("Connection", "Upgrade")
		outreq.Header.Set("Upgrade", "websocket")
	}
	if keepTE {
		outreq.Header.Set("Te", "trailers")
	}
	redact := sess.Len() > 0
	if redact {
		// Ask for gzip only and decode every declared layer below, so the
		// redactor sees plain bytes; other encodings are refused.
		outreq.Header.Set("Accept-Encoding", "gzip")
		if ws {
			// permessage-deflate would hide frame payloads from the scanner.
			outreq.Header.Del("Sec-Websocket-Extensions")
		}
		// A foreign credential toward a host with a bound secret would let
		// the sandbox use an allowed API under someone else's identity.
		if !d.AllowForeignCredentials {
			if err := sess.ForeignCredential(t.host, outreq.Header); err != nil {
				deny(http.StatusForbidden, err.Error())
				return
			}
		}
	}
	// Secrets are injected only into requests that leave over TLS the
	// gateway verified against the host's certificate (or for secrets that
	// allow plaintext).
	used, err := sess.RewriteRequest(t.host, outreq, t.scheme == "https")
	outreq.URL.User = nil
	if err != nil {
		deny(http.StatusForbidden, err.Error())
		return
	}
	var usedMu sync.Mutex
	var cr *countReader
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		var src io.Reader = r.Body
		if redact {
			// Trailers arrive with the body's end: check them before the
			// transport sends them (declared ones share r.Trailer).
			src = &trailerCheck{r: r.Body, check: func() error { return sess.Trailer(t.host, r.Trailer) }}
			outreq.Trailer = r.Trailer
			if len(outreq.Trailer) > 0 {
				// HTTP/1.1 sends trailers only with chunked bodies (an HTTP/2
				// client may declare both a length and trailers).
				outreq.ContentLength = -1
				outreq.Header.Del("Content-Length")
			}
		}
		cr = &countReader{r: src}
		var rd io.Reader = cr
		if redact {
			var subst bool
			rd, subst = sess.RequestBody(t.host, cr, t.scheme == "https", func(i int) { usedMu.Lock(); used = append(used, i); usedMu.Unlock() })
			if subst {
				outreq.ContentLength = -1
				outreq.Header.Del("Content-Length")
			}
			// Errors (a blocked placeholder) surface through countReader's
			// wrapper below.
			rd = &errRecorder{r: rd, rec: cr}
		}
		outreq.Body = bodyCloser{Reader: rd, c: r.Body}
	} else {
		outreq.Body = nil
		outreq.ContentLength = 0
	}

	f := &flow{req: preq, rec: rec}
	p.track(f)
	defer p.untrack(f)

	var resp *http.Response
	if r.ProtoMajor < 2 && directEligible(outreq, ws) {
		// Stopping the request closes its connections (flow.closeAll), so
		// it needs no context of its own. On the HTTP/1 loop the
		// connection's cancellation (client gone, revoke of the
		// connection, Close) reaches the flow through the loop, without
		// an allocation per request; through net/http, through the
		// request's context.
		var client net.Conn
		if hw, ok := w.ResponseWriter.(*h1Response); ok {
			client = hw.s.raw
			hw.s.inflight.Store(f)
			defer hw.s.inflight.CompareAndSwap(f, nil)
			if r.Context().Err() != nil {
				f.closeAll()
			}
		} else {
			stop := context.AfterFunc(r.Context(), f.closeAll)
			defer stop()
		}
		resp, err = p.roundTripDirect(outreq, t, f, client)
	} else {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		f.addCloser(cancel)
		outreq = outreq.WithContext(ctx)
		rt := p.transport
		if r.ProtoMajor < 2 {
			rt = p.transport1
		}
		resp, err = rt.RoundTrip(outreq)
	}
	setBytesOut := func() {
		if cr != nil {
			rec.BytesOut, _ = cr.result()
		}
		usedMu.Lock()
		rec.Secrets = sess.Names(used)
		usedMu.Unlock()
	}
	if err != nil {
		setBytesOut()
		var be *secrets.BlockedError
		var dd *DialDeniedError
		_, bodyErr := func() (int64, error) {
			if cr == nil {
				return 0, nil
			}
			return cr.result()
		}()
		switch {
		case errors.As(bodyErr, &be) || errors.As(err, &be):
			deny(http.StatusForbidden, be.Error())
		case errors.As(err, &dd):
			deny(http.StatusForbidden, dd.Error())
		case f.revoked.Load():
			rec.Reason = "revoked before the response arrived"
			emit()
			panic(http.ErrAbortHandler)
		case r.Context().Err() != nil:
			rec.Decision = receipts.Allow
			rec.Reason = d.Reason + "; client went away"
			emit()
		default:
			rec.Decision = receipts.Allow
			rec.Status = http.StatusBadGateway
			rec.Reason = d.Reason + "; upstream error: " + sess.Scrub(err.Error())
			emit()
			writeDenied(w, http.StatusBadGateway, "upstream error: "+sess.Scrub(err.Error()))
		}
		return
	}
	defer resp.Body.Close()
	rec.Decision = receipts.Allow
	rec.Status = resp.StatusCode
	rec.Reason = d.Reason

	if resp.StatusCode == http.StatusSwitchingProtocols {
		if !ws {
			setBytesOut()
			deny(http.StatusBadGateway, "upstream switched protocols without a WebSocket upgrade")
			return
		}
		if redact && resp.Header.Get("Sec-Websocket-Extensions") != "" {
			setBytesOut()
			deny(http.StatusBadGateway, "upstream negotiated a WebSocket extension the gateway did not offer (frames could not be checked for secrets)")
			return
		}
		setBytesOut()
		p.relayWebSocket(w, resp, ci, &rec, f, t.host)
		emit()
		return
	}
	var decoded io.Reader
	if redact {
		rd, err := decodeBody(resp)
		if err != nil {
			setBytesOut()
			deny(http.StatusBadGateway, err.Error())
			return
		}
		decoded = rd
	}
	removeHopByHop(resp.Header)
	// The response's header values are ours: moved, not copied.
	dst := w.Header()
	for k, vs := range resp.Header {
		dst[k] = vs
	}
	var body io.Reader = resp.Body
	if redact {
		sess.RedactHeader(dst)
		if r.Method != http.MethodHead && resp.StatusCode != http.StatusNotModified {
			dst.Del("Content-Length")
		}
		body = sess.RedactReader(decoded)
	}
	w.WriteHeader(resp.StatusCode)
	flush := resp.ContentLength < 0
	n, werr, rerr := copyResponse(w, body, flush)
	rec.BytesIn = n
	if len(resp.Trailer) > 0 {
		tr := resp.Trailer.Clone()
		sess.RedactHeader(tr)
		for k, vs := range tr {
			for _, v := range vs {
				dst.Add(http.TrailerPrefix+k, v)
			}
		}
	}
	setBytesOut()
	switch {
	case f.revoked.Load():
		rec.Reason += "; response cut by revoke"
		emit()
		panic(http.ErrAbortHandler)
	case rerr != nil:
		rec.Reason += "; upstream body error: " + sess.Scrub(rerr.Error())
		emit()
		// Abort so the client sees a truncated response, not a complete one.
		panic(http.ErrAbortHandler)
	case werr != nil:
		rec.Reason += "; client went away"
	default:
		// The response is complete: send it before the receipt is
		// written (on this goroutine), not after, so the client does not
		// wait for the log. The HTTP/1 loop ends the response whatever its
		// framing; through net/http only with a declared length (flushing
		// a body of unknown length would switch it to chunked encoding).
		if rf, ok := w.ResponseWriter.(responseFinisher); ok {
			rf.finishResponse()
		} else if len(resp.Trailer) == 0 && dst.Get("Content-Length") != "" {
			w.Flush()
		}
	}
	emit()
}

// responseFinisher is a ResponseWriter that can end a complete response
// (framing, trailers, flush) before its handler returns.
type responseFinisher interface{ finishResponse() }

// errRecorder records a body error from the secrets scanner in the count
// reader, because the transport may report a different error.
type errRecorder struct {
	r   io.Reader
	rec *countReader
}

func (e *errRecorder) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	if err != nil && err != io.EOF {
		e.rec.mu.Lock()
		if e.rec.err == nil || !errors.Is(e.rec.err, secrets.ErrBlocked) {
			e.rec.err = err
		}
		e.rec.mu.Unlock()
	}
	return n, err
}

// copyResponse streams src to w, flushing after each read when flush is set
// (streams of unknown length: server-sent events, model token streams). It
// reports the bytes written and, separately, write and read errors.
func copyResponse(w http.ResponseWriter, src io.Reader, flush bool) (int64, error, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var rc *http.ResponseController
	if flush {
		rc = http.NewResponseController(w)
	}
	var total int64
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			wn, werr := w.Write(buf[:n])
			total += int64(wn)
			if werr != nil {
				return total, werr, nil
			}
			if flush {
				if err := rc.Flush(); err != nil {
					return total, err, nil
				}
			}
		}
		if rerr == io.EOF {
			return total, nil, nil
		}
		if rerr != nil {
			return total, nil, rerr
		}
	}
}

// relayWebSocket completes an allowed WebSocket upgrade and relays frames
// both ways. Real secret values from upstream cut the connection (frames
// cannot be rewritten without re-framing).
func (p *Proxy) relayWebSocket(w *countingWriter, resp *http.Response, ci *connInfo, rec *receipts.Record, f *flow, host policy.Host) {
	back, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		rec.Decision, rec.Status, rec.Reason = receipts.Deny, http.StatusBadGateway, "upstream upgrade body is not writable"
		writeDenied(w, http.StatusBadGateway, rec.Reason)
		return
	}
	defer back.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rec.Decision, rec.Status, rec.Reason = receipts.Deny, http.StatusBadGateway, "cannot take over the client connection: "+err.Error()
		writeDenied(w, http.StatusBadGateway, rec.Reason)
		return
	}
	if !p.ownConn(conn) {
		conn.Close()
		return
	}
	defer p.releaseConn(conn)
	defer conn.Close()
	f.addCloser(func() { conn.Close(); back.Close() })
	sess := p.secrets()
	h := resp.Header.Clone()
	sess.RedactHeader(h)
	fmt.Fprintf(brw.Writer, "HTTP/1.1 101 Switching Protocols\r\n")
	_ = h.Write(brw.Writer)
	brw.Writer.WriteString("\r\n")
	if err := brw.Writer.Flush(); err != nil {
		rec.Reason += "; client went away"
		return
	}
	type result struct {
		n   int64
		err error
	}
	outc := make(chan result, 1)
	// Client frames are masked: the scanner checks their unmasked payloads
	// (never substituting, so frame lengths stay as they are).
	var src io.Reader = brw.Reader
	if sess.Len() > 0 {
		fr := newFrameRelay(brw.Reader, func(r io.Reader) (io.Reader, func()) {
			return sess.InteractiveCheck(host, r, "WebSocket frame")
		})
		defer fr.Close()
		src = fr
	}
	fromBack, stopBack := sess.InteractiveGuard(back)
	defer stopBack()
	go func() {
		n, err := io.Copy(back, src)
		if err != nil {
			conn.Close()
		}
		back.Close()
		outc <- result{n, err}
	}()
	in, inErr := io.Copy(conn, fromBack)
	conn.Close()
	out := <-outc
	rec.BytesIn = in
	rec.BytesOut = out.n
	switch {
	case f.revoked.Load():
		rec.Reason += "; closed by revoke"
	case errors.Is(inErr, secrets.ErrInResponse):
		rec.Reason += "; cut: a secret value appeared in a WebSocket frame"
	case errors.Is(out.err, secrets.ErrBlocked):
		rec.Reason += "; cut: " + blockedReason(out.err)
	case errors.Is(out.err, errBadFrame):
		rec.Reason += "; cut: " + out.err.Error()
	}
}

// blockedReason is the secrets refusal inside err (without the I/O
// wrapping of the copy that hit it).
func blockedReason(err error) string {
	var be *secrets.BlockedError
	if errors.As(err, &be) {
		return be.Error()
	}
	return err.Error()
}

// trailerCheck runs check when r ends, turning io.EOF into check's error:
// request trailers are read with the body's end, and the transport sends
// them only after the body reader returned io.EOF.
type trailerCheck struct {
	r     io.Reader
	check func() error
}

func (t *trailerCheck) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	if err == io.EOF {
		if cerr := t.check(); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

// maxEncodingLayers bounds the Content-Encoding layers decoded.
const maxEncodingLayers = 4

// decodeBody returns resp's body with every declared Content-Encoding layer
// decoded (gzip only; identity ignored), and removes the encoding headers.
// Any other encoding, or more than maxEncodingLayers, is an error: the
// response could not be checked for secrets.
func decodeBody(resp *http.Response) (io.Reader, error) {
	var layers []string
	for _, v := range resp.Header.Values("Content-Encoding") {
		for _, e := range strings.Split(v, ",") {
			e = strings.ToLower(strings.TrimSpace(e))
			if e == "" || e == "identity" {
				continue
			}
			if e != "gzip" && e != "x-gzip" {
				return nil, fmt.Errorf("upstream sent a %q-encoded response, which cannot be checked for secrets", e)
			}
			layers = append(layers, e)
		}
	}
	if len(layers) > maxEncodingLayers {
		return nil, fmt.Errorf("upstream sent a response with %d content-encoding layers (at most %d are decoded)", len(layers), maxEncodingLayers)
	}
	var body io.Reader = resp.Body
	if len(layers) > 0 {
		// The last listed encoding was applied last: decode it first.
		body = &lazyGunzip{src: body, layers: len(layers)}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
	return body, nil
}

// lazyGunzip decodes layers nested gzip streams, opening them on the first
// read (so a slow upstream does not block the response head).
type lazyGunzip struct {
	src    io.Reader
	layers int
	r      io.Reader
	err    error
}

func (g *lazyGunzip) Read(b []byte) (int, error) {
	if g.r == nil && g.err == nil {
		r := g.src
		for range g.layers {
			zr, err := gzip.NewReader(r)
			if err == io.EOF {
				// An empty body (HEAD, 204, 304) has no layers to decode.
				g.err = io.EOF
				break
			}
			if err != nil {
				g.err = fmt.Errorf("decoding a gzip content-encoding layer: %w", err)
				break
			}
			r = zr
		}
		g.r = r
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.r.Read(b)
}
