package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	mdns "github.com/miekg/dns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// dnsCmd: probe dns [--tcp] [--type A|AAAA] NAME SERVER[:53] [TIMEOUT].
// It sends one raw query (no search list, no /etc/hosts, no fallback), so a
// test controls exactly which server is asked.
func dnsCmd(args []string) error {
	a, err := parseArgs(args, []string{"type"}, []string{"tcp"})
	if err != nil {
		return err
	}
	if len(a.pos) < 2 || len(a.pos) > 3 {
		return fmt.Errorf("%w: dns [--tcp] [--type A|AAAA] NAME SERVER[:53] [TIMEOUT]", errUsage)
	}
	timeout, err := parseTimeout(a.pos[2:])
	if err != nil {
		return err
	}
	qtype := mdns.TypeA
	switch t := strings.ToUpper(a.value("type")); t {
	case "", "A":
	case "AAAA":
		qtype = mdns.TypeAAAA
	default:
		return fmt.Errorf("%w: --type %q: want A or AAAA", errUsage, t)
	}
	server := a.pos[1]
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(server, "53")
	}
	network := "udp"
	if a.present["tcp"] {
		network = "tcp"
	}
	m := new(mdns.Msg)
	m.SetQuestion(mdns.Fqdn(a.pos[0]), qtype)
	c := &mdns.Client{Net: network, Timeout: timeout}
	r, _, err := c.Exchange(m, server)
	if err != nil {
		return fmt.Errorf("%s %s: %w", network, server, err)
	}
	var addrs []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *mdns.A:
			addrs = append(addrs, v.A.String())
		case *mdns.AAAA:
			addrs = append(addrs, v.AAAA.String())
		}
	}
	rcode := mdns.RcodeToString[r.Rcode]
	if r.Rcode != mdns.RcodeSuccess || len(addrs) == 0 {
		return fmt.Errorf("rcode=%s answers=%d from %s/%s", rcode, len(addrs), network, server)
	}
	fmt.Printf("OK %s %s %s from %s/%s\n", rcode, mdns.TypeToString[qtype], strings.Join(addrs, ","), network, server)
	return nil
}

// quicInitialSize is the minimum size of a client's QUIC Initial datagram.
const quicInitialSize = 1200

// quic sends one datagram shaped like a QUIC v1 client Initial (long
// header, version 1, random connection ID, padded to 1200 bytes) and waits
// for any reply.
func quic(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	b := make([]byte, quicInitialSize)
	_, _ = rand.Read(b)
	b[0] = 0xc3 // long header, fixed bit, Initial, 4-byte packet number
	binary.BigEndian.PutUint32(b[1:5], 1)
	b[5] = 8 // destination connection ID length (ID: b[6:14], random)
	b[14] = 0
	b[15] = 0 // token length
	rest := quicInitialSize - 18
	b[16], b[17] = 0x40|byte(rest>>8), byte(rest) // 2-byte varint length
	if _, err := c.Write(b); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	fmt.Printf("OK reply %d bytes from %s\n", n, c.RemoteAddr())
	return nil
}

// ping sends one ICMP (or ICMPv6) echo request to host and waits for the
// reply. It uses an unprivileged ICMP datagram socket (Docker allows those
// to every group via net.ipv4.ping_group_range) and falls back to a raw
// socket (CAP_NET_RAW).
func ping(host string, timeout time.Duration) error {
	ipa, err := net.ResolveIPAddr("ip", host)
	if err != nil {
		return err
	}
	v4 := ipa.IP.To4() != nil
	var (
		dgramNet, rawNet, wildcard string
		proto                      int
		echo, reply                icmp.Type
	)
	if v4 {
		dgramNet, rawNet, wildcard, proto, echo, reply = "udp4", "ip4:icmp", "0.0.0.0", 1, ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	} else {
		dgramNet, rawNet, wildcard, proto, echo, reply = "udp6", "ip6:ipv6-icmp", "::", 58, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	var dst net.Addr = &net.UDPAddr{IP: ipa.IP, Zone: ipa.Zone}
	mode := "dgram"
	c, err := icmp.ListenPacket(dgramNet, wildcard)
	if err != nil {
		c2, err2 := icmp.ListenPacket(rawNet, wildcard)
		if err2 != nil {
			return fmt.Errorf("no ICMP socket: %v; raw: %v", err, err2)
		}
		c, dst, mode = c2, ipa, "raw"
	}
	defer c.Close()
	id := os.Getpid() & 0xffff
	data := []byte("vak-probe-ping")
	msg := icmp.Message{Type: echo, Body: &icmp.Echo{ID: id, Seq: 1, Data: data}}
	wb, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(wb, dst); err != nil {
		return fmt.Errorf("send (%s socket): %w", mode, err)
	}
	deadline := time.Now().Add(timeout)
	_ = c.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for {
		n, peer, err := c.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no echo reply from %s (%s socket): %w", ipa, mode, err)
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != reply {
			continue
		}
		e, ok := m.Body.(*icmp.Echo)
		// Datagram sockets rewrite the ID and only deliver our replies.
		if !ok || (mode == "raw" && e.ID != id) || string(e.Data) != string(data) {
			continue
		}
		fmt.Printf("OK echo reply from %s (%s socket)\n", peerIP(peer), mode)
		return nil
	}
}

func peerIP(a net.Addr) string {
	switch v := a.(type) {
	case *net.UDPAddr:
		return v.IP.String()
	case *net.IPAddr:
		return v.IP.String()
	}
	if a == nil {
		return "?"
	}
	return a.String()
}

// unixSendWait bounds how long unixSend waits for the peer to close.
const unixSendWait = 60 * time.Second

// unixSend writes file's bytes to the UNIX socket path as they are (a
// request no client library would send) and prints OK and what the peer
// answers, quoted on one line, once it closes (or, having answered,
// resets) the connection.
func unixSend(path, file string) error {
	req, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("unix", path, 3*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(unixSendWait))
	if _, err := c.Write(req); err != nil {
		return err
	}
	reply, err := io.ReadAll(c)
	if errors.Is(err, syscall.ECONNRESET) && len(reply) > 0 {
		// A server that answers before it has read the whole request
		// (a refusal) and then closes resets the connection.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("after %d bytes of reply %s: %w", len(reply), strconv.Quote(string(reply)), err)
	}
	fmt.Println("OK", strconv.Quote(string(reply)))
	return nil
}
