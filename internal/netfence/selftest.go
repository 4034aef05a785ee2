package netfence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// DefaultCanaryPort is where the gateway's canary listens (TCP and UDP, on
// every address of the gateway, its egress side included). Nothing from
// the sandbox may ever arrive there directly.
const DefaultCanaryPort = 15099

// CanaryPrefix starts every self-test payload; the canary records the
// payloads it receives.
const CanaryPrefix = "vak-fence-selftest "

// Canary listens for the fence self-test: it records the first line of
// every TCP connection and UDP datagram that reaches it, one per line in
// its file. A self-test passes only if its nonce is not in the file.
type Canary struct {
	tcp  net.Listener
	udp  net.PacketConn
	path string
	mu   sync.Mutex
	wg   sync.WaitGroup
}

// ListenCanary starts a canary on addr (TCP and UDP) recording into path.
func ListenCanary(addr, path string) (*Canary, error) {
	c := &Canary{path: path}
	var err error
	if c.tcp, err = net.Listen("tcp", addr); err != nil {
		return nil, fmt.Errorf("netfence: canary: %w", err)
	}
	if c.udp, err = net.ListenPacket("udp", c.tcp.Addr().String()); err != nil {
		c.tcp.Close()
		return nil, fmt.Errorf("netfence: canary: %w", err)
	}
	c.wg.Add(2)
	go c.serveTCP()
	go c.serveUDP()
	return c, nil
}

// Addr is the canary's TCP address (UDP is on the same port).
func (c *Canary) Addr() net.Addr { return c.tcp.Addr() }

// Close stops the canary.
func (c *Canary) Close() error {
	c.tcp.Close()
	c.udp.Close()
	c.wg.Wait()
	return nil
}

func (c *Canary) record(proto string, from net.Addr, payload []byte) {
	line := strings.ToValidUTF8(strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, string(payload)), "?")
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.OpenFile(c.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s %s\n", proto, from, line)
}

func (c *Canary) serveTCP() {
	defer c.wg.Done()
	for {
		conn, err := c.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer conn.Close()
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, _ := bufio.NewReader(io.LimitReader(conn, 256)).ReadString('\n')
			c.record("tcp", conn.RemoteAddr(), []byte(line))
		}()
	}
}

func (c *Canary) serveUDP() {
	defer c.wg.Done()
	buf := make([]byte, 512)
	for {
		n, from, err := c.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		c.record("udp", from, buf[:n])
	}
}

// CanaryHits reports which lines of a canary's file carry nonce.
func CanaryHits(file []byte, nonce string) []string {
	var hits []string
	for _, l := range strings.Split(string(file), "\n") {
		if nonce != "" && strings.Contains(l, CanaryPrefix+nonce) {
			hits = append(hits, l)
		}
	}
	return hits
}

// SelfTest is what a self-test probes from inside the sandbox namespace.
type SelfTest struct {
	Config
	// Targets are the canary's addresses: the gateway's address on the
	// sandbox network and on its egress side.
	Targets []netip.AddrPort
	// Nonce marks this run's payloads.
	Nonce string
	// DeniedName is a name no rule allows (random, per run); Sinkhole is
	// the block answer expected for it (invalid: NXDOMAIN expected).
	DeniedName string
	Sinkhole   netip.Addr
	// Resolver is where the namespace's programs send DNS (Docker's
	// embedded 127.0.0.11:53); the fence must hand it to the gateway.
	Resolver netip.AddrPort
	// Timeout bounds each probe.
	Timeout time.Duration
}

// Run probes the fence from the current network namespace and returns one
// line per check and an error naming every check that failed. It cannot
// see the canary: the caller checks the canary's file for the nonce.
//
//   - the rules verify (Verify);
//   - TCP to each canary address is not accepted by anything but the local
//     forwarder, which relays it to the gateway (which denies it): either
//     the connection fails, or it is closed without a byte;
//   - a UDP datagram to each canary address is sent into the fence's drop;
//   - DNS for a denied name is answered by the gateway (the sinkhole, or
//     NXDOMAIN), not by anyone else.
func (s SelfTest) Run(ctx context.Context) ([]string, error) {
	if s.Timeout <= 0 {
		s.Timeout = 2 * time.Second
	}
	type probe struct {
		name string
		run  func() error
	}
	probes := []probe{{"nftables rules verify", func() error { return Verify(s.Config) }}}
	payload := []byte(CanaryPrefix + s.Nonce + "\n")
	for _, t := range s.Targets {
		probes = append(probes, probe{"tcp " + t.String() + " only relayed", func() error {
			// An accepted connection is local or in-subnet (well under
			// the bound); a dropped SYN costs the whole bound. A direct
			// arrival the bound cuts short is still seen by the canary.
			d := net.Dialer{Timeout: s.Timeout / 4}
			c, err := d.DialContext(ctx, "tcp4", t.String())
			if err != nil {
				return nil // dropped: fine
			}
			defer c.Close()
			c.Write(payload)
			c.SetReadDeadline(time.Now().Add(s.Timeout))
			var b [64]byte
			n, err := c.Read(b[:])
			if n > 0 {
				return fmt.Errorf("something answered %q", b[:n])
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return errors.New("the connection stayed open: not refused by the gateway")
			}
			return nil
		}}, probe{"udp " + t.String() + " dropped", func() error {
			c, err := net.Dial("udp4", t.String())
			if err != nil {
				return nil
			}
			defer c.Close()
			c.Write(payload)
			c.SetReadDeadline(time.Now().Add(s.Timeout / 4))
			var b [64]byte
			if n, _ := c.Read(b[:]); n > 0 {
				return fmt.Errorf("a reply came back: %q", b[:n])
			}
			return nil
		}})
	}
	if s.DeniedName != "" {
		probes = append(probes, probe{"dns " + s.DeniedName + " answered by the gateway", func() error {
			m := new(mdns.Msg)
			m.SetQuestion(mdns.Fqdn(s.DeniedName), mdns.TypeA)
			r, _, err := (&mdns.Client{Timeout: s.Timeout}).ExchangeContext(ctx, m, s.Resolver.String())
			if err != nil {
				return err
			}
			if !s.Sinkhole.IsValid() {
				if r.Rcode != mdns.RcodeNameError {
					return fmt.Errorf("want NXDOMAIN, got %s with %d answer(s)", mdns.RcodeToString[r.Rcode], len(r.Answer))
				}
				return nil
			}
			if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
				return fmt.Errorf("want the sinkhole %v, got %s with %d answer(s)", s.Sinkhole, mdns.RcodeToString[r.Rcode], len(r.Answer))
			}
			if a, ok := r.Answer[0].(*mdns.A); !ok || a.A.String() != s.Sinkhole.String() {
				return fmt.Errorf("want the sinkhole %v, got %v", s.Sinkhole, r.Answer[0])
			}
			return nil
		}})
	}
	// At once: a dropped SYN costs the whole timeout, once.
	results := make([]error, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = p.run()
		}()
	}
	wg.Wait()
	var report []string
	var errs []error
	for i, p := range probes {
		if err := results[i]; err != nil {
			report = append(report, "FAIL "+p.name+": "+err.Error())
			errs = append(errs, fmt.Errorf("%s: %w", p.name, err))
			continue
		}
		report = append(report, "ok   "+p.name)
	}
	return report, errors.Join(errs...)
}
