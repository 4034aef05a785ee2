package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"vak/internal/egress/logins"
	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
	"vak/internal/egress/sigv4"
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

// RemoveHopByHop removes from h the headers its Connection header names
// and the hop-by-hop headers (hopHeaders): what the gateway does to every
// request and response it forwards (bench/egress's floor with vak's checks
// does it too).
func RemoveHopByHop(h http.Header) {
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
//
// Its concerns are split the way httputil.ReverseProxy.ServeHTTP splits
// them: decide (pure: the request's own checks and the policy), the
// outgoing request (outgoing, its Rewrite), the round trip (roundTrip, its
// Transport), the response (relay, with relayUpgrade for WebSocket), and
// one error path (fail, its ErrorHandler) for every request that ends
// without a response to relay.
func (p *Proxy) forward(w *countingWriter, r *http.Request, ci *connInfo, t target) {
	p.stats.requests.Add(1)
	x := exchange{p: p, w: w, r: r, t: t, sess: p.secrets(), ws: isWebSocket(r)}
	proto := t.scheme
	if x.ws {
		proto = map[string]string{"http": "ws", "https": "wss"}[t.scheme]
	}
	x.rec = p.baseRecord(ci, proto)
	x.rec.Method = r.Method
	x.rec.Host, x.rec.Port = t.host.String(), t.port
	x.rec.Path = x.sess.Scrub(r.URL.Path)
	defer x.recoverPanic()
	if p.testHookRequest != nil {
		p.testHookRequest(r)
	}
	if err := p.receiptsBroken(); err != nil {
		x.fail(&refusal{status: http.StatusServiceUnavailable, reason: err.Error()})
		return
	}
	v := decide(p.Policy(), x.sess, r, t, x.ws)
	if v.askable {
		p.ask(r.Context(), &v)
	}
	x.d = v.d
	x.rec.Rule, x.rec.RuleName = v.d.Rule, v.d.RuleName
	if v.refused != nil {
		x.fail(v.refused)
		return
	}
	outreq, err := x.outgoing()
	if err != nil {
		x.fail(err)
		return
	}
	x.f = &flow{req: v.req, rec: x.rec, asked: v.asked}
	p.track(x.f)
	defer p.untrack(x.f)
	defer x.release()
	resp, err := x.roundTrip(outreq)
	if err == nil && x.f.revoked.Load() {
		// The head came in after the revoke (the upstream answering the
		// cancelled request): nothing of it is relayed.
		resp.Body.Close()
		err = errRevokedFlow
	}
	if err != nil {
		x.fail(err)
		return
	}
	defer resp.Body.Close()
	x.rec.Decision = receipts.Allow
	x.rec.Status = resp.StatusCode
	x.rec.Reason = x.d.Reason
	if resp.StatusCode == http.StatusSwitchingProtocols {
		x.relayUpgrade(resp, ci)
		return
	}
	x.relay(resp)
}

// errRevokedFlow is the round trip's outcome when a revoke came before
// the response head was relayed.
var errRevokedFlow = errors.New("flow revoked")

// exchange is one forwarded request: what forward's steps share, and the
// receipt they fill in.
type exchange struct {
	p    *Proxy
	w    *countingWriter
	r    *http.Request
	t    target
	sess *secrets.Session
	ws   bool
	// redact is set when the session has secrets or the request goes to
	// a login's token endpoint: request parts are checked and responses
	// decoded and redacted.
	redact bool
	// login names the login whose token endpoint the request goes to.
	login string
	// mintGuard cuts a response that carries new AWS credentials (the
	// request was re-signed with the AWS key, for a service other than S3).
	mintGuard bool
	d         policy.Decision
	f         *flow

	rec     receipts.Record
	emitted bool
	// cr counts the request body sent (nil without a body); used lists the
	// secrets substituted into the request head, bodyUsed those and the
	// ones the body's scanner substituted (nil unless it scans).
	cr       *countReader
	used     []int
	bodyUsed *usedSecrets

	// What the round trip holds until forward returns: the HTTP/1 loop's
	// connection (its in-flight flow), the stop of the flow's closing on
	// the request context, the cancel of the transport's context.
	h1     *h1Server
	stop   func() bool
	cancel context.CancelFunc
}

// refusal is a request the gateway answers itself: the receipt's status
// and reason, and the client's answer (the reason when msg is empty).
type refusal struct {
	status int
	reason string
	msg    string
}

func (e *refusal) Error() string { return e.reason }

// verdict is decide's answer: the policy's request and decision, and the
// refusal when the request is not allowed.
type verdict struct {
	req     policy.Request
	d       policy.Decision
	refused *refusal
	// askable: refused because no rule matched (a person may allow it);
	// asked: a person did.
	askable, asked bool
}

// decide is the decision on one request, without I/O: the request's own
// checks (its path, names that would carry a placeholder, WebSocket over
// HTTP/2), then the policy. Until the policy is asked, no rule decides
// (policy.NoRule).
func decide(pol *policy.Policy, sess *secrets.Session, r *http.Request, t target, ws bool) verdict {
	v := verdict{d: policy.Decision{Rule: policy.NoRule}}
	// "OPTIONS *" (the server itself, not a resource) is decided like any
	// request, with the path "*", which only rules without paths match.
	if !isAsterisk(r) {
		if err := policy.CanonicalPath(r.URL.Path); err != nil {
			v.refused = &refusal{status: http.StatusBadRequest, reason: err.Error()}
			return v
		}
	}
	// Names travel in the clear (DNS, SNI) and are never substituted.
	if err := sess.CheckName(t.host.Name); err != nil {
		v.refused = &refusal{status: http.StatusForbidden, reason: err.Error()}
		return v
	}
	// Other upgrades (h2c, ...) are optional for the server: the Upgrade
	// header is dropped with the other hop-by-hop headers.
	if ws && r.ProtoMajor != 1 {
		v.refused = &refusal{status: http.StatusBadRequest, reason: "WebSocket over HTTP/2 is not supported"}
		return v
	}
	v.req = policy.Request{Proto: policy.ProtoHTTP, Host: t.host, Port: t.port, Method: r.Method, Path: r.URL.Path, WebSocket: ws}
	v.d = pol.Decide(v.req)
	if !v.d.Allow {
		v.refused = policyRefusal(v.req, v.d.Reason)
		v.askable = v.d.Rule == policy.NoRule
	}
	return v
}

// policyRefusal is the refusal of req for reason: it names the host and
// the reason, so that a user who sees it in a client's output knows it is
// vak's policy speaking.
func policyRefusal(req policy.Request, reason string) *refusal {
	return &refusal{status: http.StatusForbidden, reason: reason,
		msg: fmt.Sprintf("%s %s:%d: %s (see the [network] rules of the user config)", req.Method, req.Host, req.Port, reason)}
}

// ask holds a request no rule allows until a person answers, when asking
// is on (Proxy.Asks): allowed, v becomes an allow decided by no rule;
// otherwise its refusal gives the ask's outcome.
func (p *Proxy) ask(ctx context.Context, v *verdict) {
	reg := p.asking()
	if reg == nil {
		return
	}
	allow, why := reg.Ask(ctx, v.req)
	if allow {
		v.d = policy.Decision{Allow: true, Rule: policy.NoRule, Reason: why}
		v.refused, v.asked = nil, true
		return
	}
	v.d.Reason = why
	v.refused = policyRefusal(v.req, why)
}

// isAsterisk reports an "OPTIONS *" request.
func isAsterisk(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.URL.Path == "*" && r.URL.RawQuery == ""
}

// emit writes the receipt, once.
func (x *exchange) emit() {
	if !x.emitted {
		x.emitted = true
		x.p.emit(x.rec)
	}
}

// deny refuses the request: a deny receipt and the gateway's answer.
func (x *exchange) deny(status int, reason, msg string) {
	x.rec.Decision = receipts.Deny
	x.rec.Status, x.rec.Reason = status, reason
	x.emit()
	if msg == "" {
		msg = reason
	}
	writeDenied(x.w, status, msg)
}

// abort writes the receipt and cuts the client's connection, so that the
// client does not take what it got for a complete response.
func (x *exchange) abort() {
	x.emit()
	panic(http.ErrAbortHandler)
}

// recoverPanic turns a panic while forwarding into a deny receipt (unless
// it is an abort, whose receipt is written) and a cut connection, never a
// dead gateway.
func (x *exchange) recoverPanic() {
	if v := recover(); v != nil {
		if v != http.ErrAbortHandler {
			x.p.logf("panic while forwarding to %s (connection closed, gateway unaffected): %v", x.rec.Host, v)
			x.rec.Decision = receipts.Deny
			x.rec.Reason = "internal error: the request was aborted"
		}
		x.abort()
	}
}

// fail is the one error path of a request that has no response to relay:
// refused by the gateway (a refusal, a secret where it may not go, a
// denied dial), revoked or abandoned while in flight, or failed upstream.
// It completes the receipt and answers the client, if it is still there.
func (x *exchange) fail(err error) {
	x.setBytesOut()
	if rf, ok := err.(*refusal); ok {
		x.deny(rf.status, rf.reason, rf.msg)
		return
	}
	var be *secrets.BlockedError
	var dd *DialDeniedError
	switch {
	case errors.As(x.bodyErr(), &be) || errors.As(err, &be):
		x.deny(http.StatusForbidden, be.Error(), "")
	case errors.As(err, &dd):
		x.deny(http.StatusForbidden, dd.Error(), "")
	case errors.Is(x.bodyErr(), sigv4.ErrMismatch), errors.Is(x.bodyErr(), sigv4.ErrMalformed):
		// A chunk-signed AWS payload whose chunk the placeholder key did
		// not sign: the upstream never got the chunk.
		x.deny(http.StatusForbidden, "AWS chunk-signed payload: "+x.bodyErr().Error(), "")
	case x.f != nil && x.f.revoked.Load():
		x.rec.Reason = "revoked before the response arrived"
		x.abort()
	case x.r.Context().Err() != nil:
		x.rec.Decision = receipts.Allow
		x.rec.Reason = x.d.Reason + "; client went away"
		x.emit()
	default:
		x.rec.Decision = receipts.Allow
		x.rec.Status = http.StatusBadGateway
		x.rec.Reason = x.d.Reason + "; upstream error: " + x.sess.Scrub(err.Error())
		x.emit()
		writeDenied(x.w, http.StatusBadGateway, "upstream error: "+x.sess.Scrub(err.Error()))
	}
}

// bodyErr is the request body's first error (a blocked placeholder), if
// any.
func (x *exchange) bodyErr() error {
	if x.cr == nil {
		return nil
	}
	_, err := x.cr.result()
	return err
}

// setBytesOut puts the request bytes sent and the secrets substituted
// into the receipt.
func (x *exchange) setBytesOut() {
	if x.cr != nil {
		x.rec.BytesOut, _ = x.cr.result()
	}
	if u := x.bodyUsed; u != nil {
		u.mu.Lock()
		x.rec.Secrets = x.sess.Names(u.idx)
		u.mu.Unlock()
		return
	}
	x.rec.Secrets = x.sess.Names(x.used)
}

// usedSecrets collects the secrets substituted into a request whose body
// is scanned: the scanner adds to them on the transport's goroutine.
type usedSecrets struct {
	mu  sync.Mutex
	idx []int
}

func (u *usedSecrets) add(i int) {
	u.mu.Lock()
	u.idx = append(u.idx, i)
	u.mu.Unlock()
}

// outgoing makes the request sent upstream from the client's: the
// decided target, HTTP/1.1, no hop-by-hop headers, secrets substituted
// where they may go and checked everywhere else.
func (x *exchange) outgoing() (*http.Request, error) {
	r, t := x.r, x.t
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
	if isAsterisk(r) {
		outreq.URL.Path, outreq.URL.Opaque = "", "*"
	}
	outreq.Host = ""
	outreq.Close = false
	outreq.Proto, outreq.ProtoMajor, outreq.ProtoMinor = "HTTP/1.1", 1, 1
	RemoveHopByHop(outreq.Header)
	if x.ws {
		outreq.Header.Set("Connection", "Upgrade")
		outreq.Header.Set("Upgrade", "websocket")
	}
	if keepTE {
		outreq.Header.Set("Te", "trailers")
	}
	if err := x.secretHeaders(outreq); err != nil {
		return nil, err
	}
	x.outgoingBody(outreq)
	return outreq, nil
}

// secretHeaders prepares outreq's head for the secrets of the session:
// encodings the redactor can read, no foreign credential toward a host
// with a bound secret, placeholders substituted only over TLS the gateway
// verified against the host's certificate (or for secrets that allow
// plaintext).
func (x *exchange) secretHeaders(outreq *http.Request) error {
	if x.p.Logins != nil {
		x.login = x.p.Logins.TokenEndpoint(x.t.host, x.r.URL.Path)
	}
	x.redact = x.sess.Len() > 0 || x.login != ""
	if x.redact {
		// Ask for gzip only and decode every declared layer, so the
		// redactor sees plain bytes; other encodings are refused.
		outreq.Header.Set("Accept-Encoding", "gzip")
		if x.ws {
			// permessage-deflate would hide frame payloads from the scanner.
			outreq.Header.Del("Sec-Websocket-Extensions")
		}
		// An AWS signature made with the placeholder key is made again
		// with the real one (before the checks below see the real key).
		aws, err := x.sess.ResignAWS(x.t.host, x.r.Host, outreq, x.t.scheme == "https", x.d.AllowForeignCredentials, x.bodyHash)
		if err != nil {
			return x.awsRefusal(err)
		}
		x.used = aws.Used
		if aws.Body != nil && x.r.Body != nil {
			x.r.Body = bodyCloser{Reader: aws.Body(x.r.Body), c: x.r.Body}
		}
		// S3 objects are the user's data; other services' responses
		// must not bring newly minted keys into the sandbox.
		x.mintGuard = aws.Used != nil && aws.Service != "s3"
		// A foreign credential toward a host with a bound secret would let
		// the sandbox use an allowed API under someone else's identity.
		if !x.d.AllowForeignCredentials {
			if err := x.sess.ForeignCredential(x.t.host, outreq.Header); err != nil {
				return &refusal{status: http.StatusForbidden, reason: err.Error()}
			}
		}
	}
	used, err := x.sess.RewriteRequest(x.t.host, outreq, x.t.scheme == "https")
	outreq.URL.User = nil
	if err != nil {
		return &refusal{status: http.StatusForbidden, reason: err.Error()}
	}
	x.used = append(x.used, used...)
	return nil
}

// maxSignedBody bounds the body the gateway reads to hash for an AWS
// signature (requests that declare no X-Amz-Content-Sha256: API calls,
// not uploads).
const maxSignedBody = 32 << 20

// bodyHash reads the client's body (up to maxSignedBody) and returns its
// hex SHA-256; the body sent upstream is the bytes read.
func (x *exchange) bodyHash() (string, error) {
	r := x.r
	if r.Body == nil || r.Body == http.NoBody {
		return sigv4.EmptySHA256, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxSignedBody+1))
	if err != nil {
		return "", &refusal{status: http.StatusBadRequest, reason: "reading the body of an AWS-signed request: " + x.sess.Scrub(err.Error())}
	}
	if len(b) > maxSignedBody {
		return "", &refusal{status: http.StatusRequestEntityTooLarge, reason: fmt.Sprintf("the body of an AWS-signed request without X-Amz-Content-Sha256 is over %d MiB: the gateway hashes such bodies in memory", maxSignedBody>>20)}
	}
	r.Body = bodyCloser{Reader: bytes.NewReader(b), c: r.Body}
	r.ContentLength = int64(len(b))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// awsRefusal is the refusal of a request whose AWS signature is not
// re-signed.
func (x *exchange) awsRefusal(err error) error {
	var rf *refusal
	if errors.As(err, &rf) {
		return rf
	}
	status := http.StatusForbidden
	if errors.Is(err, sigv4.ErrUnsupported) {
		status = http.StatusNotImplemented
	}
	return &refusal{status: status, reason: err.Error()}
}

// outgoingBody gives outreq the client's body, counted and, with secrets,
// scanned (substituted toward bound hosts, blocked elsewhere) together
// with its trailers.
func (x *exchange) outgoingBody(outreq *http.Request) {
	r := x.r
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		outreq.Body = nil
		outreq.ContentLength = 0
		return
	}
	var src io.Reader = r.Body
	if x.redact {
		// Trailers arrive with the body's end: check them before the
		// transport sends them (declared ones share r.Trailer).
		sess, host := x.sess, x.t.host
		src = &trailerCheck{r: r.Body, check: func() error { return sess.Trailer(host, r.Trailer) }}
		outreq.Trailer = r.Trailer
		if len(outreq.Trailer) > 0 {
			// HTTP/1.1 sends trailers only with chunked bodies (an HTTP/2
			// client may declare both a length and trailers).
			outreq.ContentLength = -1
			outreq.Header.Del("Content-Length")
		}
	}
	x.cr = &countReader{r: src}
	var rd io.Reader = x.cr
	if x.redact {
		var subst bool
		x.bodyUsed = &usedSecrets{idx: x.used}
		rd, subst = x.sess.RequestBody(x.t.host, x.cr, x.t.scheme == "https", x.bodyUsed.add)
		if subst {
			outreq.ContentLength = -1
			outreq.Header.Del("Content-Length")
		}
		// Errors (a blocked placeholder) surface through countReader's
		// wrapper below.
		rd = &errRecorder{r: rd, rec: x.cr}
	}
	outreq.Body = bodyCloser{Reader: rd, c: r.Body}
}

// roundTrip sends outreq upstream and returns the response head. HTTP/1
// requests the direct path can carry take it (h1upstream.go); the others
// go through net/http's transports, HTTP/2 ones where the server offers
// it. Either way, stopping the flow stops the request.
func (x *exchange) roundTrip(outreq *http.Request) (*http.Response, error) {
	r, f := x.r, x.f
	if r.ProtoMajor < 2 && directEligible(outreq, x.ws) {
		// Stopping the request closes its connections (flow.closeAll), so
		// it needs no context of its own. On the HTTP/1 loop the
		// connection's cancellation (client gone, revoke of the
		// connection, Close) reaches the flow through the loop, without
		// an allocation per request; through net/http, through the
		// request's context.
		var client net.Conn
		if hw, ok := x.w.ResponseWriter.(*h1Response); ok {
			client = hw.s.raw
			x.h1 = hw.s
			hw.s.inflight.Store(f)
			if r.Context().Err() != nil {
				f.closeAll()
			}
		} else {
			x.stop = context.AfterFunc(r.Context(), f.closeAll)
		}
		return x.p.roundTripDirect(outreq, x.t, f, client)
	}
	ctx, cancel := context.WithCancel(r.Context())
	x.cancel = cancel
	f.addCloser(cancel)
	outreq = outreq.WithContext(ctx)
	rt := x.p.transport
	if r.ProtoMajor < 2 {
		rt = x.p.transport1
	}
	return rt.RoundTrip(outreq)
}

// release lets go of what roundTrip holds, once the response is over.
func (x *exchange) release() {
	if x.h1 != nil {
		x.h1.inflight.CompareAndSwap(x.f, nil)
	}
	if x.stop != nil {
		x.stop()
	}
	if x.cancel != nil {
		x.cancel()
	}
}

// relayUpgrade completes a WebSocket upgrade the client asked for (and
// only that), unless the upstream negotiated an extension the frame
// scanner cannot see through.
func (x *exchange) relayUpgrade(resp *http.Response, ci *connInfo) {
	if !x.ws {
		x.fail(&refusal{status: http.StatusBadGateway, reason: "upstream switched protocols without a WebSocket upgrade"})
		return
	}
	if x.redact && resp.Header.Get("Sec-Websocket-Extensions") != "" {
		x.fail(&refusal{status: http.StatusBadGateway, reason: "upstream negotiated a WebSocket extension the gateway did not offer (frames could not be checked for secrets)"})
		return
	}
	x.setBytesOut()
	x.p.relayWebSocket(x.w, resp, ci, &x.rec, x.f, x.t.host)
	x.emit()
}

// relay streams the response to the client: hop-by-hop headers removed,
// every content-encoding layer decoded and secrets redacted when the
// session has any, trailers after the body. A response cut by a revoke or
// by the upstream is cut for the client too.
func (x *exchange) relay(resp *http.Response) {
	var decoded io.Reader
	if x.redact {
		rd, err := decodeBody(resp)
		if err != nil {
			x.fail(&refusal{status: http.StatusBadGateway, reason: err.Error()})
			return
		}
		decoded = rd
	}
	RemoveHopByHop(resp.Header)
	// The response's header values are ours: moved, not copied.
	dst := x.w.Header()
	for k, vs := range resp.Header {
		dst[k] = vs
	}
	var body io.Reader = resp.Body
	if x.login != "" && x.r.Method != http.MethodHead {
		rd, err := x.loginResponse(dst, decoded)
		if err != nil {
			x.fail(&refusal{status: http.StatusBadGateway, reason: err.Error()})
			return
		}
		decoded = rd
		if resp.StatusCode >= 400 {
			// An expired or revoked login: the client shows the
			// provider's answer; the receipt says which login it was.
			x.rec.Reason += fmt.Sprintf("; login %s: the provider refused the token request (%d): if the login expired or was revoked, log in again inside the sandbox or run vak login import", x.login, resp.StatusCode)
		}
	}
	if x.redact {
		x.sess.RedactHeader(dst)
		if x.r.Method != http.MethodHead && resp.StatusCode != http.StatusNotModified {
			dst.Del("Content-Length")
		}
		body = x.sess.RedactReader(decoded)
		if x.mintGuard {
			body = secrets.GuardMinted(body)
		}
	}
	x.w.WriteHeader(resp.StatusCode)
	flush := resp.ContentLength < 0
	n, werr, rerr := copyResponse(x.w, body, flush)
	x.rec.BytesIn = n
	if len(resp.Trailer) > 0 {
		tr := resp.Trailer.Clone()
		x.sess.RedactHeader(tr)
		for k, vs := range tr {
			for _, v := range vs {
				dst.Add(http.TrailerPrefix+k, v)
			}
		}
	}
	x.setBytesOut()
	switch {
	case x.f.revoked.Load():
		x.rec.Reason += "; response cut by revoke"
		x.abort()
	case rerr != nil:
		x.rec.Reason += "; upstream body error: " + x.sess.Scrub(rerr.Error())
		x.abort()
	case werr != nil:
		x.rec.Reason += "; client went away"
	default:
		// The response is complete: send it before the receipt is
		// written (on this goroutine), not after, so the client does not
		// wait for the log. The HTTP/1 loop ends the response whatever its
		// framing; through net/http only with a declared length (flushing
		// a body of unknown length would switch it to chunked encoding).
		if rf, ok := x.w.ResponseWriter.(responseFinisher); ok {
			rf.finishResponse()
		} else if len(resp.Trailer) == 0 && dst.Get("Content-Length") != "" {
			x.w.Flush()
		}
	}
	x.emit()
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

// loginResponse reads a login token endpoint's whole response body (at
// most logins.MaxResponse bytes) and returns what the login handler makes
// of it, with its length declared.
func (x *exchange) loginResponse(h http.Header, body io.Reader) (io.Reader, error) {
	data, err := io.ReadAll(io.LimitReader(body, logins.MaxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("login %s: reading the token response: %w", x.login, err)
	}
	if len(data) > logins.MaxResponse {
		return nil, fmt.Errorf("login %s: the token response is larger than %d bytes", x.login, logins.MaxResponse)
	}
	out, err := x.p.Logins.TokenResponse(x.login, h, data)
	if err != nil {
		return nil, fmt.Errorf("login %s: %w", x.login, err)
	}
	h.Set("Content-Length", strconv.Itoa(len(out)))
	return bytes.NewReader(out), nil
}

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
