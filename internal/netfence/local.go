package netfence

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// LocalConfig is the fence of a network namespace that has no interface
// but its loopback (the native backend's sandbox, docs/gateway.md "Native
// proxied"): the gateway is not on any network the namespace can reach, so
// the forwarder and the DNS relay run in the namespace itself, on
// 127.0.0.1, and reach the gateway through UNIX sockets opened before the
// sandbox started. The rules
//
//   - send DNS (UDP and TCP port 53, to any server) to the DNS relay;
//   - leave 127.0.0.1 alone (the namespace's own services, the relay and the
//     forwarder);
//   - redirect every other TCP connection (other loopback addresses
//     included: they are the host's, reachable only through the gateway's
//     rules) to the forwarder;
//   - drop everything else: UDP, ICMP, IPv6, raw IP.
type LocalConfig struct {
	// ForwarderPort is the forwarder's port on 127.0.0.1.
	ForwarderPort uint16
	// DNSPort is the DNS relay's port on 127.0.0.1 (UDP and TCP).
	DNSPort uint16
}

// Defaults of LocalConfig.
const (
	DefaultLocalDNSPort = 15053
)

// WithDefaults fills zero ports.
func (c LocalConfig) WithDefaults() LocalConfig {
	if c.ForwarderPort == 0 {
		c.ForwarderPort = DefaultForwarderPort
	}
	if c.DNSPort == 0 {
		c.DNSPort = DefaultLocalDNSPort
	}
	return c
}

// dnsRelayTimeout bounds one relayed DNS exchange.
const dnsRelayTimeout = 10 * time.Second

// maxDNSInflight bounds the UDP queries relayed at once; more are dropped
// (the client retries).
const maxDNSInflight = 64

// DNSRelay answers DNS on the namespace's loopback by asking the gateway's
// resolver over a stream (DNS over TCP framing: a two-byte length before
// each message) that Dial opens. It never talks to anything else.
type DNSRelay struct {
	// Dial connects to the gateway's DNS stream socket (required).
	Dial func(ctx context.Context) (net.Conn, error)

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// ServeUDP answers the datagrams of pc until it is closed.
func (r *DNSRelay) ServeUDP(pc net.PacketConn) error {
	sem := make(chan struct{}, maxDNSInflight)
	buf := make([]byte, 65535)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				r.wg.Wait()
				return nil
			}
			return err
		}
		if n < 12 {
			continue // not a DNS message
		}
		q := append([]byte(nil), buf[:n]...)
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-sem }()
			if resp, err := r.exchange(q); err == nil {
				pc.WriteTo(resp, addr)
			}
		}()
	}
}

// exchange sends one query over a fresh stream and returns the answer.
func (r *DNSRelay) exchange(q []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dnsRelayTimeout)
	defer cancel()
	c, err := r.Dial(ctx)
	if err != nil {
		return nil, err
	}
	r.track(c, true)
	defer r.track(c, false)
	defer c.Close()
	c.SetDeadline(time.Now().Add(dnsRelayTimeout))
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(q)))
	if _, err := c.Write(append(msg, q...)); err != nil {
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// ServeTCP relays each DNS-over-TCP connection of l to its own stream to
// the gateway until l is closed.
func (r *DNSRelay) ServeTCP(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				r.wg.Wait()
				return nil
			}
			return err
		}
		r.track(c, true)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.track(c, false)
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), dnsRelayTimeout)
			up, err := r.Dial(ctx)
			cancel()
			if err != nil {
				return
			}
			r.track(up, true)
			defer r.track(up, false)
			defer up.Close()
			splice(c, up)
		}()
	}
}

// Close ends every exchange in flight (the listeners are the caller's).
func (r *DNSRelay) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
}

func (r *DNSRelay) track(c net.Conn, add bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		r.conns = map[net.Conn]struct{}{}
	}
	if add {
		r.conns[c] = struct{}{}
	} else {
		delete(r.conns, c)
	}
}
