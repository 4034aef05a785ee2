package netfence

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/netip"
	"sync"
	"time"

	"vak/internal/egress/origdst"
	"vak/internal/egress/proxyproto"
)

// DefaultDialTimeout bounds the connection to the gateway.
const DefaultDialTimeout = 10 * time.Second

// Forwarder accepts the connections nftables redirected to it, looks up each
// one's original destination, and relays it to the gateway's transparent
// port behind a PROXY v2 header carrying that destination. It never
// connects anywhere but the gateway.
type Forwarder struct {
	// Gateway is the transparent listener (gateway address and port).
	Gateway netip.AddrPort
	// OriginalDst returns a redirected connection's original destination;
	// nil means SO_ORIGINAL_DST (origdst.Lookup).
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Dial connects to the gateway; nil means a net.Dialer with
	// DefaultDialTimeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ErrorLog receives per-connection errors; nil means log.Default.
	ErrorLog *log.Logger
	// Loopback relays redirected connections to loopback destinations
	// too (the native fence: the namespace's own 127.0.0.1 is never
	// redirected, so another loopback address is the host's, and the
	// gateway decides it by its rules' cidrs like any address). A
	// connection made straight to the forwarder is refused either way.
	Loopback bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Serve accepts on ln until it is closed, then waits for relays in flight.
func (f *Forwarder) Serve(ln net.Listener) error {
	defer f.wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		f.track(c, true)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.track(c, false)
			defer c.Close()
			if err := f.relay(c); err != nil {
				f.logf("netfence: %s: %v", c.RemoteAddr(), err)
			}
		}()
	}
}

// Close ends every relay in flight (the listener is the caller's).
func (f *Forwarder) Close() {
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
}

func (f *Forwarder) track(c net.Conn, add bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		f.conns = map[net.Conn]struct{}{}
	}
	if add {
		f.conns[c] = struct{}{}
	} else {
		delete(f.conns, c)
	}
}

func (f *Forwarder) logf(format string, a ...any) {
	if f.ErrorLog != nil {
		f.ErrorLog.Printf(format, a...)
		return
	}
	log.Printf(format, a...)
}

// ErrLoop reports a connection made straight to the forwarder (not
// redirected): relaying it would have no real destination.
var ErrLoop = errors.New("connection was not redirected (no original destination)")

func (f *Forwarder) relay(c net.Conn) error {
	lookup := f.OriginalDst
	if lookup == nil {
		lookup = origdst.Lookup
	}
	dst, err := lookup(c)
	if err != nil {
		return err
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	if dst == local || (dst.Addr().IsLoopback() && !f.Loopback) || dst.Addr().IsUnspecified() {
		return ErrLoop
	}
	src, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return err
	}
	hdr, err := proxyproto.Append(nil, src, dst)
	if err != nil {
		return err
	}
	dial := f.Dial
	if dial == nil {
		d := &net.Dialer{Timeout: DefaultDialTimeout}
		dial = d.DialContext
	}
	up, err := dial(context.Background(), "tcp", f.Gateway.String())
	if err != nil {
		return err
	}
	f.track(up, true)
	defer f.track(up, false)
	defer up.Close()
	if _, err := up.Write(hdr); err != nil {
		return err
	}
	return splice(c, up)
}

// splice copies both ways, propagating half-closes, until both are done.
func splice(a, b net.Conn) error {
	errc := make(chan error, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
		errc <- err
	}
	go cp(a, b)
	go cp(b, a)
	err1, err2 := <-errc, <-errc
	if err1 != nil && !errors.Is(err1, net.ErrClosed) {
		return err1
	}
	if err2 != nil && !errors.Is(err2, net.ErrClosed) {
		return err2
	}
	return nil
}
