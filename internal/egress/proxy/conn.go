package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// prefixConn is a net.Conn whose first reads come from r (bytes already
// read while sniffing the stream), then from the connection.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// withPrefix returns c reading first from br's buffered bytes (and rec, if
// given, before them).
func withPrefix(c net.Conn, rec []byte, br *bufio.Reader) net.Conn {
	var rs []io.Reader
	if len(rec) > 0 {
		rs = append(rs, bytes.NewReader(rec))
	}
	if br != nil && br.Buffered() > 0 {
		b, _ := br.Peek(br.Buffered())
		rs = append(rs, bytes.NewReader(bytes.Clone(b)))
	}
	if len(rs) == 0 {
		return c
	}
	rs = append(rs, c)
	return &prefixConn{Conn: c, r: io.MultiReader(rs...)}
}

// closeWriter is implemented by TCP and TLS connections.
type closeWriter interface{ CloseWrite() error }

func closeWrite(c net.Conn) {
	for {
		switch v := c.(type) {
		case closeWriter:
			_ = v.CloseWrite()
			return
		case *prefixConn:
			c = v.Conn
		case *watchConn:
			c = v.Conn
		default:
			_ = c.Close()
			return
		}
	}
}

// watchConn wraps the HTTP/1 connections the gateway serves with net/http,
// to notice the error responses net/http writes on its own for requests it
// cannot parse (400, 431, 501, ...): those never reach a handler, but each
// needs a receipt. Handlers count the responses they start; a response head
// on the wire that no handler started is one of those.
type watchConn struct {
	net.Conn
	ci *connInfo
	// started counts response heads started by handlers and not yet seen.
	started  atomic.Int64
	onReject func(ci *connInfo, status int)
}

func (c *watchConn) Write(b []byte) (int, error) {
	if len(b) >= 12 && bytes.HasPrefix(b, []byte("HTTP/1.")) && b[8] == ' ' {
		switch {
		case b[9] == '1':
			// 1xx (100 Continue written by net/http): not a final response.
		case c.started.Load() > 0:
			c.started.Add(-1)
		case (b[9] == '4' || b[9] == '5') && c.onReject != nil:
			status := int(b[9]-'0')*100 + int(b[10]-'0')*10 + int(b[11]-'0')
			c.onReject(c.ci, status)
		}
	}
	return c.Conn.Write(b)
}

// ConnectionState lets net/http fill Request.TLS for HTTP/1 over an
// intercepted TLS connection.
func (c *watchConn) ConnectionState() tls.ConnectionState {
	if tc, ok := c.Conn.(*tls.Conn); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
}

// countingWriter counts response heads for its watchConn and bytes for the
// receipt.
type countingWriter struct {
	http.ResponseWriter
	wc      *watchConn
	wrote   bool
	status  int
	written int64
}

func (w *countingWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		w.status = code
		if w.wc != nil {
			w.wc.started.Add(1)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

func (w *countingWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach Hijack and deadlines.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// queueListener feeds connections the gateway has already accepted and
// sniffed (tunnels, intercepted TLS) to an http.Server.
type queueListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newQueueListener() *queueListener {
	return &queueListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *queueListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *queueListener) push(c net.Conn) error {
	select {
	case l.ch <- c:
		return nil
	case <-l.done:
		return net.ErrClosed
	}
}

func (l *queueListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *queueListener) Addr() net.Addr { return &net.TCPAddr{} }

// helloConn feeds a TLS server the client's bytes and swallows what it writes;
// used only to parse a ClientHello.
type helloConn struct {
	r io.Reader
}

func (c helloConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c helloConn) Write(b []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (c helloConn) Close() error                     { return nil }
func (c helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c helloConn) SetDeadline(time.Time) error      { return nil }
func (c helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c helloConn) SetWriteDeadline(time.Time) error { return nil }

var errHelloSeen = errors.New("client hello captured")

// readClientHello parses the TLS ClientHello at the start of r with the
// standard library's parser and returns it with every byte it consumed, so
// the connection can be replayed into a real handshake (or relayed as is).
func readClientHello(r io.Reader) (*tls.ClientHelloInfo, []byte, error) {
	var rec bytes.Buffer
	var hello *tls.ClientHelloInfo
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		c := *h
		c.Conn = nil
		hello = &c
		return nil, errHelloSeen
	}}
	err := tls.Server(helloConn{r: io.TeeReader(r, &rec)}, cfg).Handshake()
	if hello == nil {
		if err == nil {
			err = errors.New("no ClientHello")
		}
		return nil, rec.Bytes(), err
	}
	return hello, rec.Bytes(), nil
}
