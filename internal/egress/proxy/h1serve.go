package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// The HTTP/1.x serving loop for intercepted connections (TLS after the
// gateway's handshake, plain HTTP in a CONNECT tunnel or a transparent
// connection). net/http's server starts a background-read goroutine for
// every request, stops it through a read deadline when the handler returns,
// and moves every keep-alive request through several goroutines; at one
// request at a time that hand-off, not the work, is most of what the gateway
// adds. This loop reads each request with the standard library's parser
// (http.ReadRequest), applies the checks net/http's server adds on top of it
// (exactly: see readRequest below), runs the same handler (serveInner), and
// writes the response, all on the connection's goroutine.
//
// What net/http does that the loop keeps, each with a test in
// h1serve_test.go: the head size limit (MaxHeaderBytes + 4096 bytes, 431),
// the idle and read-header timeouts, the refusals of malformed requests
// (400, 501 for an unknown transfer coding, 505, 417 for an unknown Expect,
// each with a receipt), 100-continue, Connection: close and HTTP/1.0
// keep-alive, response framing (Content-Length, chunked with trailers, no
// body for HEAD, 1xx, 204 and 304), draining up to 256 KiB of an unread
// request body to keep the connection, Hijack for WebSocket upgrades, and
// cancelling the request's context when the client goes away (a background
// read, started only when a handler runs longer than bgReadDelay). HTTP/2
// connections and the explicit proxy's own connections stay on net/http.

const (
	// maxPostHandlerReadBytes is how much of an unread request body is
	// discarded to keep the connection (net/http's value).
	maxPostHandlerReadBytes = 256 << 10
	// bufferBeforeChunking is how much of a response body of undeclared
	// length is held to send it with a Content-Length instead of chunked
	// (net/http's value).
	bufferBeforeChunking = 2048
	// bgReadDelay is how long a handler runs before the loop starts
	// watching the client connection for a close (net/http watches from the
	// start, at the cost of a goroutine and a deadline change per request).
	bgReadDelay = 20 * time.Millisecond
	// errorDrainTimeout bounds reading what a refused client still sends,
	// so that closing the connection does not reset it before the refusal
	// is read.
	errorDrainTimeout = 500 * time.Millisecond
)

var aLongTimeAgo = time.Unix(1, 0)

// errHeadTooLarge is a request head over MaxHeaderBytes (+ 4096).
var errHeadTooLarge = errors.New("request head too large")

// h1StatusError is a refusal with net/http's wording.
type h1StatusError struct {
	code int
	text string
}

func (e h1StatusError) Error() string { return strconv.Itoa(e.code) + " " + e.text }

// h1ConnReader is what the loop's bufio.Reader reads: the connection, a
// byte limit while a head is read, a copy of the head's bytes (to see the
// Host header, which http.ReadRequest removes), and the background read.
type h1ConnReader struct {
	c      net.Conn
	remain int64 // < 0: no limit
	hit    bool
	tee    *[]byte

	mu      sync.Mutex
	cond    sync.Cond
	armed   bool // the background read may start
	inBG    bool // the background read is running
	hasByte bool
	byte1   [1]byte
	bgErr   error // the client went away while a handler ran
	cancel  context.CancelFunc
}

func (r *h1ConnReader) Read(b []byte) (int, error) {
	if r.remain == 0 {
		r.hit = true
		return 0, io.EOF
	}
	if r.remain > 0 && int64(len(b)) > r.remain {
		b = b[:r.remain]
	}
	if len(b) == 0 {
		return 0, nil
	}
	r.mu.Lock()
	for r.inBG {
		r.cond.Wait()
	}
	if r.hasByte {
		r.hasByte = false
		b[0] = r.byte1[0]
		r.mu.Unlock()
		r.account(b[:1])
		return 1, nil
	}
	if err := r.bgErr; err != nil {
		r.mu.Unlock()
		return 0, err
	}
	r.mu.Unlock()
	n, err := r.c.Read(b)
	r.account(b[:n])
	return n, err
}

func (r *h1ConnReader) account(b []byte) {
	if r.remain > 0 {
		r.remain -= int64(len(b))
	}
	if r.tee != nil {
		*r.tee = append(*r.tee, b...)
	}
}

// arm lets the background read start when t fires.
func (r *h1ConnReader) arm(t *time.Timer) {
	r.mu.Lock()
	r.armed = true
	r.mu.Unlock()
	t.Reset(bgReadDelay)
}

// backgroundRead runs on t's goroutine: it reads one byte (kept for the
// next request) or the error that says the client is gone, which cancels
// the connection's context and so the request in flight.
func (r *h1ConnReader) backgroundRead() {
	r.mu.Lock()
	if !r.armed || r.bgErr != nil || r.hasByte {
		r.mu.Unlock()
		return
	}
	r.armed = false
	r.inBG = true
	r.mu.Unlock()
	n, err := r.c.Read(r.byte1[:])
	r.mu.Lock()
	r.inBG = false
	if n == 1 {
		r.hasByte = true
	}
	var ne net.Error
	var cancel context.CancelFunc
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		r.bgErr = err
		cancel = r.cancel
	}
	r.cond.Broadcast()
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// disarm stops the background read (interrupting it if it runs) before
// the loop reads the connection itself.
func (r *h1ConnReader) disarm(t *time.Timer) {
	t.Stop()
	r.mu.Lock()
	r.armed = false
	if r.inBG {
		_ = r.c.SetReadDeadline(aLongTimeAgo)
		for r.inBG {
			r.cond.Wait()
		}
	}
	r.mu.Unlock()
}

// h1Server is one client connection served by the loop.
type h1Server struct {
	p        *Proxy
	ci       *connInfo
	c        net.Conn
	raw      net.Conn // under c (TCP, below TLS)
	cr       *h1ConnReader
	br       *bufio.Reader
	bw       *bufio.Writer
	ctx      context.Context
	tlsState *tls.ConnectionState
	remote   string
	lim      Limits
	bgTimer  *time.Timer
	head     []byte
	// lastMethod lets a client send a stray CRLF after a POST body.
	lastMethod string
	// cw wraps the response of the request being served (serveInner).
	cw countingWriter
	// inflight is the flow of the request on the direct upstream path,
	// if any: the connection's cancellation closes it (abortInflight).
	inflight atomic.Pointer[flow]
}

// abortInflight stops the request in flight, if any, when the
// connection's context ends (the client went away, the connection was
// revoked, the gateway closes).
func (s *h1Server) abortInflight() {
	if f := s.inflight.Load(); f != nil {
		f.closeAll()
	}
}

// serveH1 serves HTTP/1.x requests on c until the connection ends. It runs
// on the caller's goroutine; the caller closes the connection afterwards.
// raw is the connection under c (TCP, below TLS): what stopping a request
// closes on the client's side.
func (p *Proxy) serveH1(c, raw net.Conn, ci *connInfo, tc *tls.Conn) {
	ctx, cancel := context.WithCancel(p.baseCtx)
	defer cancel()
	// Closing a TLS connection sends close_notify, as net/http's server.
	defer c.Close()
	if ci.flow != nil {
		// Revoking the connection cancels the request in flight too.
		ci.flow.addCloser(cancel)
		defer p.untrack(ci.flow)
	}
	s := &h1Server{p: p, ci: ci, c: c, raw: raw, lim: p.limits(), ctx: context.WithValue(ctx, ctxKey{}, ci)}
	if tc != nil {
		st := tc.ConnectionState()
		s.tlsState = &st
	}
	if ra := c.RemoteAddr(); ra != nil {
		s.remote = ra.String()
	}
	defer context.AfterFunc(ctx, s.abortInflight)()
	s.cr = &h1ConnReader{c: c, remain: -1, cancel: cancel}
	s.cr.cond.L = &s.cr.mu
	s.bgTimer = time.AfterFunc(time.Hour, s.cr.backgroundRead)
	s.bgTimer.Stop()
	defer s.cr.disarm(s.bgTimer)
	s.br = bufio.NewReaderSize(s.cr, 4<<10)
	s.bw = bufio.NewWriterSize(c, 4<<10)
	w := &h1Response{s: s}
	for first := true; ; first = false {
		req, err := s.readRequest(first)
		if err != nil {
			s.refuse(err)
			return
		}
		if !s.serveRequest(w, req) {
			return
		}
	}
}

// readRequest reads the next request head and applies net/http's server
// checks.
func (s *h1Server) readRequest(first bool) (*http.Request, error) {
	c := s.c
	if !first {
		// As net/http: wait for four bytes (no request is shorter); a
		// client that sends fewer and stops gets no answer.
		if s.br.Buffered() < 4 {
			_ = c.SetReadDeadline(time.Now().Add(s.lim.IdleTimeout))
		}
		if _, err := s.br.Peek(4); err != nil {
			return nil, err
		}
	}
	s.head = append(s.head[:0], peekBuffered(s.br)...)
	// The whole head is often here already; otherwise the client has
	// ReadHeaderTimeout to send the rest.
	if first || !headComplete(s.head) {
		_ = c.SetReadDeadline(time.Now().Add(s.lim.ReadHeaderTimeout))
	}
	s.cr.remain = int64(s.lim.MaxHeaderBytes) + 4096
	s.cr.hit = false
	s.cr.tee = &s.head
	if s.lastMethod == http.MethodPost {
		peek, _ := s.br.Peek(4)
		_, _ = s.br.Discard(numLeadingCRorLF(peek))
	}
	req, err := http.ReadRequest(s.br)
	s.cr.tee = nil
	hit := s.cr.hit
	s.cr.remain = -1
	if cap(s.head) > 8<<10 {
		defer func() { s.head = nil }()
	}
	if err != nil {
		if hit {
			return nil, errHeadTooLarge
		}
		return nil, err
	}
	if !(req.ProtoMajor == 1 || req.ProtoMajor == 2 && req.ProtoMinor == 0 && req.Method == "PRI" && req.RequestURI == "*") {
		return nil, h1StatusError{http.StatusHTTPVersionNotSupported, "unsupported protocol version"}
	}
	s.lastMethod = req.Method
	host, haveHost := req.Host, true
	if req.Host == "" || req.URL.Host != "" {
		// http.ReadRequest removed the Host header: look at the head.
		host, haveHost = headHost(s.head)
	}
	isH2Upgrade := req.Method == "PRI" && len(req.Header) == 0 && req.URL.Path == "*" && req.Proto == "HTTP/2.0"
	if req.ProtoAtLeast(1, 1) && !haveHost && !isH2Upgrade && req.Method != http.MethodConnect {
		return nil, h1StatusError{http.StatusBadRequest, "missing required Host header"}
	}
	if haveHost && !httpguts.ValidHostHeader(host) {
		return nil, h1StatusError{http.StatusBadRequest, "malformed Host header"}
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, h1StatusError{http.StatusBadRequest, "invalid header name"}
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, h1StatusError{http.StatusBadRequest, "invalid header value"}
			}
		}
	}
	return req, nil
}

// peekBuffered returns the bytes br holds without reading.
func peekBuffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

// headComplete reports whether b holds a whole request head.
func headComplete(b []byte) bool {
	return bytes.Contains(b, []byte("\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// headHost finds the Host header in a request head (at most one: the
// parser refuses more). Lines after the request line, up to the first
// empty one.
func headHost(head []byte) (string, bool) {
	seenRequestLine := false
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			return "", false
		}
		line := bytes.TrimSuffix(head[:i], []byte("\r"))
		head = head[i+1:]
		if !seenRequestLine {
			if len(line) > 0 {
				seenRequestLine = true
			}
			continue
		}
		if len(line) == 0 {
			return "", false
		}
		if len(line) >= 5 && bytes.EqualFold(line[:5], []byte("host:")) {
			return strings.Trim(string(line[5:]), " \t"), true
		}
	}
	return "", false
}

func numLeadingCRorLF(v []byte) (n int) {
	for _, b := range v {
		if b == '\r' || b == '\n' {
			n++
			continue
		}
		break
	}
	return
}

// refuse answers a request the parser or the checks refused, as net/http's
// server does (same status lines), with a receipt, and drains briefly so
// the close does not reset the refusal away.
func (s *h1Server) refuse(err error) {
	const errorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	var status int
	var msg string
	var se h1StatusError
	switch {
	case errors.Is(err, errHeadTooLarge):
		status = http.StatusRequestHeaderFieldsTooLarge
		msg = "HTTP/1.1 431 Request Header Fields Too Large" + errorHeaders + "431 Request Header Fields Too Large"
	case strings.Contains(err.Error(), "unsupported transfer encoding"):
		status = http.StatusNotImplemented
		msg = fmt.Sprintf("HTTP/1.1 %d %s%sUnsupported transfer encoding", status, http.StatusText(status), errorHeaders)
	case isCommonNetReadError(err):
		return // the client went away or stalled: no reply (as net/http)
	case errors.As(err, &se):
		status = se.code
		msg = fmt.Sprintf("HTTP/1.1 %d %s: %s%s%d %s: %s", se.code, http.StatusText(se.code), se.text, errorHeaders, se.code, http.StatusText(se.code), se.text)
	default:
		status = http.StatusBadRequest
		msg = "HTTP/1.1 400 Bad Request" + errorHeaders + "400 Bad Request"
	}
	s.p.rejected(s.ci, status)
	_ = s.c.SetWriteDeadline(time.Now().Add(s.lim.ReadHeaderTimeout))
	s.bw.Reset(s.c)
	_, _ = s.bw.WriteString(msg)
	if s.bw.Flush() != nil {
		return
	}
	s.lingerClose()
}

// lingerClose half-closes the connection and reads what the client still
// sends for a moment, so that the response is not lost to a reset.
func (s *h1Server) lingerClose() {
	closeWrite(s.c)
	_ = s.c.SetReadDeadline(time.Now().Add(errorDrainTimeout))
	_, _ = io.CopyN(io.Discard, s.c, maxPostHandlerReadBytes)
}

// isCommonNetReadError is net/http's test for a read error that gets no
// reply.
func isCommonNetReadError(err error) bool {
	if err == io.EOF {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "read" {
		return true
	}
	return false
}

// serveRequest runs the handler for req and finishes its response. It
// reports whether the connection can carry another request.
func (s *h1Server) serveRequest(w *h1Response, req *http.Request) bool {
	expect := req.Header.Get("Expect")
	expectContinue := hasToken(expect, "100-continue")
	if expect != "" && !expectContinue {
		s.p.rejected(s.ci, http.StatusExpectationFailed)
		w.reset(req)
		w.closeAfter = true
		w.hdr.Set("Connection", "close")
		w.WriteHeader(http.StatusExpectationFailed)
		w.finish()
		return false
	}
	var body *h1ReqBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &h1ReqBody{rc: req.Body, w: w, s: s}
		req.Body = body
		// Body reads have no deadline (net/http's ReadTimeout is not set).
		_ = s.c.SetReadDeadline(time.Time{})
	}
	req = req.WithContext(s.ctx)
	req.RemoteAddr = s.remote
	req.TLS = s.tlsState
	w.reset(req)
	if body != nil && expectContinue && req.ProtoAtLeast(1, 1) && req.ContentLength != 0 {
		w.canContinue = true
	}
	if body == nil {
		s.cr.arm(s.bgTimer)
	}
	ok := s.runHandler(w, req)
	s.cr.disarm(s.bgTimer)
	if !ok || w.hijacked {
		return false
	}
	if body != nil {
		body.closed.Store(true)
		if !body.sawEOF.Load() {
			if w.canContinue && !w.wroteContinue {
				// The client waits for 100 Continue before sending the
				// body: nothing to drain, the connection ends.
				w.closeAfter = true
			} else {
				_ = s.c.SetReadDeadline(time.Now().Add(s.lim.ReadHeaderTimeout))
				_, err := io.CopyN(io.Discard, body.rc, maxPostHandlerReadBytes+1)
				if err == io.EOF {
					body.sawEOF.Store(true)
				} else {
					w.closeAfter = true
				}
			}
		}
	}
	w.finish()
	if w.closeAfter || req.Close {
		if w.err == nil {
			s.lingerClose()
		}
		return false
	}
	return w.err == nil && s.cr.bgErr == nil
}

// runHandler calls the handler; a panic ends the connection (an aborted
// response must not look complete), as in net/http.
func (s *h1Server) runHandler(w *h1Response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				s.p.logf("panic serving %s: %v", s.remote, v)
			}
			ok = false
		}
	}()
	if s.p.testH1Handler != nil {
		s.p.testH1Handler(w, req)
		return true
	}
	s.p.serveInner(w, req)
	return true
}

// h1ReqBody is a request body served by the loop: it sends 100 Continue on
// the first read when the client asked for it, and never drains on Close
// (the loop decides what to discard).
type h1ReqBody struct {
	rc     io.ReadCloser
	w      *h1Response
	s      *h1Server
	closed atomic.Bool
	sawEOF atomic.Bool
}

func (b *h1ReqBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	b.w.writeContinue()
	n, err := b.rc.Read(p)
	if err == io.EOF && !b.sawEOF.Swap(true) {
		// As net/http: watch for the client going away once the body ended.
		b.s.cr.arm(b.s.bgTimer)
	}
	return n, err
}

func (b *h1ReqBody) Close() error {
	b.closed.Store(true)
	return nil
}

// h1Response is the loop's http.ResponseWriter (also http.Flusher and
// http.Hijacker, reached through countingWriter's Unwrap). It is reused
// for every request of a connection.
type h1Response struct {
	s   *h1Server
	req *http.Request
	hdr http.Header

	status     int // final status once WriteHeader ran
	committed  bool
	chunked    bool
	noBody     bool
	clen       int64 // declared Content-Length, or -1
	written    int64
	pend       []byte
	closeAfter bool
	hijacked   bool
	finished   bool
	err        error // first write error

	contMu        sync.Mutex
	canContinue   bool
	wroteContinue bool
}

func (w *h1Response) reset(req *http.Request) {
	pend := w.pend[:0]
	if cap(pend) > 4*bufferBeforeChunking {
		pend = nil
	}
	hdr := w.hdr
	if hdr == nil {
		hdr = make(http.Header)
	} else {
		clear(hdr)
	}
	s := w.s
	*w = h1Response{s: s, req: req, hdr: hdr, pend: pend, clen: -1}
}

func (w *h1Response) Header() http.Header { return w.hdr }

func (w *h1Response) WriteHeader(code int) {
	if w.hijacked || w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// Informational: on the wire at once, the final status follows.
		w.contMu.Lock()
		if code == http.StatusContinue {
			w.wroteContinue = true
		}
		writeStatusLine(w.s.bw, w.req.ProtoAtLeast(1, 1), code)
		_ = w.hdr.Write(w.s.bw)
		_, _ = w.s.bw.WriteString("\r\n")
		w.setErr(w.s.bw.Flush())
		w.contMu.Unlock()
		return
	}
	w.status = code
	if cl := w.hdr.Get("Content-Length"); cl != "" {
		v, err := strconv.ParseInt(cl, 10, 64)
		if err == nil && v >= 0 {
			w.clen = v
		} else {
			w.hdr.Del("Content-Length")
		}
	}
}

func (w *h1Response) setErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

// errResponseFinished is a write after finishResponse.
var errResponseFinished = errors.New("response already finished")

func (w *h1Response) Write(b []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if w.finished {
		return 0, errResponseFinished
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(b))
	if w.clen != -1 && w.written > w.clen {
		return 0, http.ErrContentLength
	}
	if w.req.Method == http.MethodHead {
		return len(b), nil
	}
	if !w.committed {
		if len(w.pend)+len(b) <= bufferBeforeChunking {
			w.pend = append(w.pend, b...)
			return len(b), nil
		}
		w.commit(false)
	}
	if w.err != nil {
		return 0, w.err
	}
	w.writeBody(b)
	if w.err != nil {
		return 0, w.err
	}
	return len(b), nil
}

func (w *h1Response) writeBody(b []byte) {
	if len(b) == 0 || w.noBody {
		return
	}
	bw := w.s.bw
	if w.chunked {
		_, _ = bw.WriteString(strconv.FormatInt(int64(len(b)), 16))
		_, _ = bw.WriteString("\r\n")
		_, _ = bw.Write(b)
		_, err := bw.WriteString("\r\n")
		w.setErr(err)
		return
	}
	_, err := bw.Write(b)
	w.setErr(err)
}

// Flush sends what was written so far.
func (w *h1Response) Flush() { _ = w.FlushError() }

// FlushError is Flush reporting the write error (http.ResponseController).
func (w *h1Response) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if w.finished {
		return w.err
	}
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	w.setErr(w.s.bw.Flush())
	return w.err
}

// Hijack hands the connection to the handler (WebSocket relay); the loop
// ends with the handler.
func (w *h1Response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.committed {
		return nil, nil, errors.New("response already started")
	}
	w.hijacked = true
	w.s.cr.disarm(w.s.bgTimer)
	_ = w.s.c.SetReadDeadline(time.Time{})
	return w.s.c, bufio.NewReadWriter(w.s.br, w.s.bw), nil
}

// writeContinue sends 100 Continue before the first body read, unless the
// final response has started.
func (w *h1Response) writeContinue() {
	w.contMu.Lock()
	defer w.contMu.Unlock()
	if !w.canContinue || w.wroteContinue || w.committed {
		return
	}
	w.wroteContinue = true
	_, _ = w.s.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	w.setErr(w.s.bw.Flush())
}

func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199:
		return false
	case status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}

// writeStatusLine writes net/http's status line (HTTP/1.0 to HTTP/1.0
// clients).
func writeStatusLine(bw *bufio.Writer, is11 bool, code int) {
	if is11 {
		_, _ = bw.WriteString("HTTP/1.1 ")
	} else {
		_, _ = bw.WriteString("HTTP/1.0 ")
	}
	if text := http.StatusText(code); text != "" {
		_, _ = bw.WriteString(strconv.Itoa(code))
		_ = bw.WriteByte(' ')
		_, _ = bw.WriteString(text)
	} else {
		fmt.Fprintf(bw, "%03d status code %d", code, code)
	}
	_, _ = bw.WriteString("\r\n")
}

// commit writes the response head, deciding the framing as net/http's
// server does; final means the handler has returned (so a body of
// undeclared length is all in pend).
func (w *h1Response) commit(final bool) {
	w.contMu.Lock()
	w.committed = true
	w.contMu.Unlock()
	h := w.hdr
	req := w.req
	code := w.status
	trailers := false
	var exclude map[string]bool
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if exclude == nil {
				exclude = map[string]bool{}
			}
			exclude[k] = true
			trailers = true
		}
	}
	if _, ok := h["Trailer"]; ok {
		trailers = true
	}
	isHEAD := req.Method == http.MethodHead
	te := h.Get("Transfer-Encoding")
	hasTE := te != ""
	if final && !trailers && !hasTE && bodyAllowedForStatus(code) && w.clen == -1 && (!isHEAD || len(w.pend) > 0) {
		w.clen = int64(len(w.pend))
		h.Set("Content-Length", strconv.Itoa(len(w.pend)))
	}
	if req.ContentLength != 0 || req.Body != http.NoBody {
		if b, ok := req.Body.(*h1ReqBody); ok && b.closed.Load() && !b.sawEOF.Load() {
			w.closeAfter = true
		}
	}
	if bodyAllowedForStatus(code) {
		if _, haveType := h["Content-Type"]; !haveType && !hasTE && h.Get("Content-Encoding") == "" && len(w.pend) > 0 {
			h.Set("Content-Type", http.DetectContentType(w.pend))
		}
	} else {
		if code == http.StatusNotModified {
			h.Del("Content-Type")
		}
		h.Del("Content-Length")
		h.Del("Transfer-Encoding")
		w.clen = -1
	}
	if _, ok := h["Date"]; !ok {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	hasCL := w.clen != -1
	if hasCL && hasTE && te != "identity" {
		h.Del("Content-Length")
		hasCL = false
		w.clen = -1
	}
	switch {
	case isHEAD || !bodyAllowedForStatus(code):
		h.Del("Transfer-Encoding")
		w.noBody = true
	case hasCL:
		h.Del("Transfer-Encoding")
	case req.ProtoAtLeast(1, 1):
		if hasTE && te == "identity" {
			w.closeAfter = true
			h.Del("Transfer-Encoding")
		} else {
			w.chunked = true
			h.Set("Transfer-Encoding", "chunked")
			h.Del("Content-Length")
		}
	default:
		// HTTP/1.0 and no length: the close ends the body.
		w.closeAfter = true
		h.Del("Transfer-Encoding")
	}
	if req.Close {
		w.closeAfter = true
	}
	switch {
	case w.closeAfter && code != http.StatusSwitchingProtocols:
		if !hasToken(h.Get("Connection"), "close") {
			h.Del("Connection")
			if req.ProtoAtLeast(1, 1) {
				h.Set("Connection", "close")
			}
		}
	case !req.ProtoAtLeast(1, 1) && hasCL:
		// An HTTP/1.0 client that asked for keep-alive (else req.Close).
		h.Set("Connection", "keep-alive")
	}
	bw := w.s.bw
	writeStatusLine(bw, req.ProtoAtLeast(1, 1), code)
	_ = h.WriteSubset(bw, exclude)
	_, err := bw.WriteString("\r\n")
	w.setErr(err)
	if len(w.pend) > 0 {
		p := w.pend
		w.pend = w.pend[:0]
		w.writeBody(p)
	}
}

// finishResponse ends a complete response before the handler returns
// (forward, so that the client does not wait for the receipt), unless the
// request body still has to be drained: that may yet add Connection: close.
func (w *h1Response) finishResponse() {
	if b, ok := w.req.Body.(*h1ReqBody); ok && !b.sawEOF.Load() {
		return
	}
	w.finish()
}

// finish completes the response (once).
func (w *h1Response) finish() {
	if w.hijacked || w.finished {
		return
	}
	w.finished = true
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
	}
	bw := w.s.bw
	if w.chunked {
		_, _ = bw.WriteString("0\r\n")
		if tr := w.trailers(); len(tr) > 0 {
			_ = tr.Write(bw)
		}
		_, err := bw.WriteString("\r\n")
		w.setErr(err)
	}
	if w.clen != -1 && !w.noBody && w.written != w.clen {
		// Less than declared: the client waits for the rest.
		w.closeAfter = true
	}
	w.setErr(bw.Flush())
	if w.err != nil {
		w.closeAfter = true
	}
}

// trailers are the TrailerPrefix keys and the declared ones.
func (w *h1Response) trailers() http.Header {
	var tr http.Header
	add := func(k string, vv []string) {
		if tr == nil {
			tr = http.Header{}
		}
		tr[http.CanonicalHeaderKey(k)] = vv
	}
	for _, v := range w.hdr["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				if vv := w.hdr.Values(k); len(vv) > 0 {
					add(k, vv)
				}
			}
		}
	}
	for k, vv := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			add(strings.TrimPrefix(k, http.TrailerPrefix), vv)
		}
	}
	return tr
}

// hasToken is net/http's test for a token in a header value (first value
// only, as the server reads it): case-insensitive, bounded by space, comma
// or tab.
func hasToken(v, token string) bool {
	if len(token) > len(v) || token == "" {
		return false
	}
	if v == token {
		return true
	}
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if b := v[sp]; b != token[0] && b|0x20 != token[0] {
			continue
		}
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if end := sp + len(token); end != len(v) && !isTokenBoundary(v[end]) {
			continue
		}
		if strings.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
