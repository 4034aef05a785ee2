package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"vak/internal/testenv/testnet"
)

// Ports the canary listens on unless --no-default-ports.
var (
	defaultCanaryTCP = []int{22, 53, 80, 443, 8080}
	defaultCanaryUDP = []int{9, 53, 443}
)

// defaultDNSPorts are where the canary parses and answers DNS (UDP and
// TCP) unless --dns says otherwise.
const defaultDNSPorts = "53"

// canaryTTL is the TTL of the canary's DNS answers.
const canaryTTL = 5

// canaryReadTimeout bounds how long the canary keeps a connection open.
const canaryReadTimeout = 2 * time.Second

type canaryConfig struct {
	Bind     string // IP to bind ("" for all)
	TCP, UDP []int
	// DNS are the ports whose traffic is parsed and answered as DNS.
	DNS     []int
	Control string
	// Answer and Answer6 are what A and AAAA queries get (Answer6 nil:
	// AAAA queries get an empty NOERROR answer).
	Answer, Answer6 net.IP
	ICMP            bool
}

func runCanary(ctx context.Context, args []string) error {
	fs := newFlags("canary")
	var cfg canaryConfig
	fs.StringVar(&cfg.Control, "control", fmt.Sprintf(":%d", testnet.DefaultControlPort), "control API address (not counted)")
	fs.StringVar(&cfg.Bind, "bind", "", "IP address to listen on (default: all)")
	tcp := fs.String("tcp", "", "extra comma-separated TCP ports to count")
	udp := fs.String("udp", "", "extra comma-separated UDP ports to count")
	noDefaults := fs.Bool("no-default-ports", false, "listen only on the --tcp and --udp ports")
	dnsPorts := fs.String("dns", defaultDNSPorts, "comma-separated ports whose traffic is answered as DNS")
	answer := fs.String("answer", "", "address for DNS A answers (default: this host's first non-loopback IPv4)")
	answer6 := fs.String("answer6", "", "address for DNS AAAA answers (default: none)")
	fs.BoolVar(&cfg.ICMP, "icmp", true, "count ICMP echo requests (needs CAP_NET_RAW; best effort)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var err error
	if !*noDefaults {
		cfg.TCP, cfg.UDP = slices.Clone(defaultCanaryTCP), slices.Clone(defaultCanaryUDP)
	}
	for _, x := range []struct {
		name string
		s    string
		dst  *[]int
	}{{"tcp", *tcp, &cfg.TCP}, {"udp", *udp, &cfg.UDP}} {
		var ps []int
		ps, err = parsePorts(x.name, x.s)
		if err != nil {
			return err
		}
		*x.dst = append(*x.dst, ps...)
		slices.Sort(*x.dst)
		*x.dst = slices.Compact(*x.dst)
	}
	if cfg.DNS, err = parsePorts("dns", *dnsPorts); err != nil {
		return err
	}
	if len(cfg.TCP)+len(cfg.UDP) == 0 {
		return fmt.Errorf("%w: canary has no ports to listen on", errUsage)
	}
	if cfg.Answer, err = parseAnswer("answer", *answer, true); err != nil {
		return err
	}
	if cfg.Answer6, err = parseAnswer("answer6", *answer6, false); err != nil {
		return err
	}
	if cfg.Answer == nil {
		cfg.Answer = firstIPv4()
	}
	c, err := startCanary(cfg)
	if err != nil {
		return err
	}
	fmt.Println(c.ready)
	<-ctx.Done()
	return c.Close()
}

func parseAnswer(flagName, s string, v4 bool) (net.IP, error) {
	if s == "" {
		return nil, nil
	}
	ip := net.ParseIP(s)
	if ip == nil || (ip.To4() != nil) != v4 {
		return nil, fmt.Errorf("%w: --%s: bad address %q", errUsage, flagName, s)
	}
	return ip, nil
}

// firstIPv4 is this host's first non-loopback IPv4 address (127.0.0.1 when
// it has none).
func firstIPv4() net.IP {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.To4()
		}
	}
	return net.IPv4(127, 0, 0, 1).To4()
}

// canary is a running canary role.
type canary struct {
	group
	cfg   canaryConfig
	ready string

	mu     sync.Mutex
	counts testnet.Counts
	recent []testnet.Event

	// Bound addresses, for tests (ports as configured, or as chosen by
	// the kernel for port 0 in unit tests).
	TCPAddrs, UDPAddrs []net.Addr
	ControlAddr        net.Addr
}

func startCanary(cfg canaryConfig) (c *canary, err error) {
	c = &canary{cfg: cfg}
	c.resetLocked()
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	hostPort := func(p int) string { return net.JoinHostPort(cfg.Bind, strconv.Itoa(p)) }
	for _, p := range cfg.TCP {
		l, err := net.Listen("tcp", hostPort(p))
		if err != nil {
			return nil, fmt.Errorf("canary: listen tcp/%d: %w", p, err)
		}
		c.add(l)
		c.TCPAddrs = append(c.TCPAddrs, l.Addr())
		bound := l.Addr().(*net.TCPAddr).Port // p, or the kernel's choice for 0
		c.goFn(func() { c.acceptLoop(l, bound, slices.Contains(cfg.DNS, p)) })
	}
	for _, p := range cfg.UDP {
		pc, err := net.ListenPacket("udp", hostPort(p))
		if err != nil {
			return nil, fmt.Errorf("canary: listen udp/%d: %w", p, err)
		}
		c.add(pc)
		c.UDPAddrs = append(c.UDPAddrs, pc.LocalAddr())
		bound := pc.LocalAddr().(*net.UDPAddr).Port
		c.goFn(func() { c.udpLoop(pc, bound, slices.Contains(cfg.DNS, p)) })
	}
	icmp := "off"
	if cfg.ICMP {
		icmp = c.startICMP()
	} else {
		c.counts.ICMPError = "disabled (--icmp=false)"
	}
	if cfg.Control != "" {
		l, err := net.Listen("tcp", cfg.Control)
		if err != nil {
			return nil, fmt.Errorf("canary: listen control %s: %w", cfg.Control, err)
		}
		c.add(l)
		c.ControlAddr = l.Addr()
		c.serveHTTP(l, newServer(c.controlHandler()))
	}
	c.ready = fmt.Sprintf("testnet canary: ready tcp=%v udp=%v dns=%v icmp=%s answer=%v control=%v",
		cfg.TCP, cfg.UDP, cfg.DNS, icmp, cfg.Answer, c.ControlAddr)
	return c, nil
}

// startICMP opens raw ICMP sockets and counts echo requests. It returns a
// description for the ready line; failures are recorded in ICMPError
// (IPv4) or only reported (IPv6, often disabled in containers).
func (c *canary) startICMP() string {
	bind := c.cfg.Bind
	var status []string
	for _, v := range []struct {
		proto, network, name string
		echoType             byte
	}{{"icmp", "ip4:icmp", "0.0.0.0", 8}, {"icmp6", "ip6:ipv6-icmp", "::", 128}} {
		addr := v.name
		if bind != "" {
			if ip := net.ParseIP(bind); ip == nil || (ip.To4() != nil) != (v.proto == "icmp") {
				continue
			}
			addr = bind
		}
		pc, err := net.ListenPacket(v.network, addr)
		if err != nil {
			if v.proto == "icmp" {
				c.counts.ICMPError = err.Error()
			}
			status = append(status, v.proto+":off("+err.Error()+")")
			fmt.Fprintf(os.Stderr, "testnet canary: not counting %s: %v\n", v.proto, err)
			continue
		}
		c.add(pc)
		status = append(status, v.proto+":on")
		c.goFn(func() {
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				// Go strips the IPv4 header; ICMPv6 sockets never see one.
				if n > 0 && buf[0] == v.echoType {
					c.hit(v.proto, 0, from, "")
				}
			}
		})
	}
	return strings.Join(status, ",")
}

// hit counts one event.
func (c *canary) hit(proto string, port int, from net.Addr, name string) {
	key := proto
	if port != 0 {
		key = proto + "/" + strconv.Itoa(port)
	}
	fromS := ""
	if from != nil {
		fromS = from.String()
	}
	c.mu.Lock()
	switch proto {
	case "tcp":
		c.counts.TCP++
	case "udp":
		c.counts.UDP++
	case "dns":
		c.counts.DNS++
	case "icmp", "icmp6":
		c.counts.ICMP++
	}
	c.counts.Total = c.counts.TCP + c.counts.UDP + c.counts.ICMP
	c.counts.ByPort[key]++
	if len(c.recent) >= testnet.RecentMax {
		c.recent = append(c.recent[:0], c.recent[1:]...)
	}
	c.recent = append(c.recent, testnet.Event{Time: time.Now().UTC(), Proto: proto, Port: port, From: fromS, Name: name})
	c.mu.Unlock()
	if name != "" {
		fmt.Fprintf(os.Stderr, "testnet canary: %s from %s (%s)\n", key, fromS, name)
	} else {
		fmt.Fprintf(os.Stderr, "testnet canary: %s from %s\n", key, fromS)
	}
}

// snapshot returns the counts so far.
func (c *canary) snapshot() testnet.Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.counts
	s.ByPort = maps.Clone(c.counts.ByPort)
	s.Recent = slices.Clone(c.recent)
	if s.Recent == nil {
		s.Recent = []testnet.Event{}
	}
	return s
}

// reset zeroes the counts and returns what they were.
func (c *canary) reset() testnet.Counts {
	old := c.snapshot()
	c.mu.Lock()
	c.resetLocked()
	c.mu.Unlock()
	return old
}

func (c *canary) resetLocked() {
	icmpErr := c.counts.ICMPError
	c.counts = testnet.Counts{ByPort: map[string]int64{}, ICMPError: icmpErr}
	c.recent = nil
}

func (c *canary) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.snapshot())
	})
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.reset())
	})
	return mux
}

func (c *canary) acceptLoop(l net.Listener, port int, isDNS bool) {
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: keep counting later
			continue
		}
		c.hit("tcp", port, conn.RemoteAddr(), "")
		remove := c.add(conn)
		c.goFn(func() {
			defer remove()
			defer conn.Close()
			if isDNS {
				c.serveDNSTCP(conn, port)
			} else {
				c.serveTCP(conn)
			}
		})
	}
}

// serveTCP answers anything that looks like an HTTP request with a 200, so
// a leaked plain-HTTP request "works", and closes other connections as soon
// as their first byte arrives (the connection is already counted).
func (c *canary) serveTCP(conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(canaryReadTimeout))
	br := bufio.NewReader(conn)
	if b, err := br.Peek(1); err != nil || b[0] < 'A' || b[0] > 'Z' {
		return // not HTTP (e.g. a TLS ClientHello): close at once
	}
	line, err := br.ReadString('\n')
	if err != nil && line == "" {
		return
	}
	if method, _, ok := strings.Cut(line, " "); ok && isToken(method) && strings.Contains(line, "HTTP/") {
		body := "canary\n"
		fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		return
	}
	_, _ = io.Copy(io.Discard, br)
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// serveDNSTCP answers length-prefixed DNS queries on conn.
func (c *canary) serveDNSTCP(conn net.Conn, port int) {
	for {
		_ = conn.SetDeadline(time.Now().Add(canaryReadTimeout))
		var n uint16
		if err := binary.Read(conn, binary.BigEndian, &n); err != nil {
			return
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		reply := c.dnsReply(msg, port, conn.RemoteAddr())
		if reply == nil {
			return
		}
		var b bytes.Buffer
		_ = binary.Write(&b, binary.BigEndian, uint16(len(reply)))
		b.Write(reply)
		if _, err := conn.Write(b.Bytes()); err != nil {
			return
		}
	}
}

func (c *canary) udpLoop(pc net.PacketConn, port int, isDNS bool) {
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		c.hit("udp", port, from, "")
		var reply []byte
		if isDNS {
			reply = c.dnsReply(buf[:n], port, from)
		}
		if reply == nil {
			reply = []byte("canary\n")
		}
		_, _ = pc.WriteTo(reply, from)
	}
}

// dnsReply counts msg when it is a DNS query and returns the answer (nil
// when msg is not a query): an A record with the configured address for A
// queries, and for AAAA queries Answer6 if set.
func (c *canary) dnsReply(msg []byte, port int, from net.Addr) []byte {
	var q mdns.Msg
	if err := q.Unpack(msg); err != nil || q.Response || len(q.Question) == 0 {
		return nil
	}
	qq := q.Question[0]
	c.hit("dns", port, from, strings.TrimSuffix(qq.Name, ".")+" "+mdns.TypeToString[qq.Qtype])
	var r mdns.Msg
	r.SetReply(&q)
	r.Authoritative = true
	hdr := mdns.RR_Header{Name: qq.Name, Class: mdns.ClassINET, Ttl: canaryTTL}
	switch {
	case qq.Qtype == mdns.TypeA && c.cfg.Answer != nil:
		hdr.Rrtype = mdns.TypeA
		r.Answer = append(r.Answer, &mdns.A{Hdr: hdr, A: c.cfg.Answer})
	case qq.Qtype == mdns.TypeAAAA && c.cfg.Answer6 != nil:
		hdr.Rrtype = mdns.TypeAAAA
		r.Answer = append(r.Answer, &mdns.AAAA{Hdr: hdr, AAAA: c.cfg.Answer6})
	}
	out, err := r.Pack()
	if err != nil {
		return nil
	}
	return out
}
