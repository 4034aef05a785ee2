package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
	"vak/internal/receipts"
)

// AddrBook remembers which names the DNS server gave each client for which
// addresses, so that a transparent connection without a name (raw TCP, TLS
// without SNI) can be attributed to the name the client looked up. It never
// decides anything by itself: the gateway still decides on the name and
// dials the addresses it resolves.
type AddrBook struct {
	mu      sync.Mutex
	entries map[bookKey]bookEntry
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

type bookKey struct {
	client, addr netip.Addr
}

type bookEntry struct {
	names   []string
	expires time.Time
}

const maxBook = 65536

func (b *AddrBook) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// Remember records that client was told name resolves to addrs, for ttl
// (plus a grace period for connections started just before expiry).
func (b *AddrBook) Remember(client netip.Addr, name string, addrs []netip.Addr, ttl time.Duration) {
	exp := b.now().Add(ttl + time.Minute)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entries == nil || len(b.entries) >= maxBook {
		b.entries = map[bookKey]bookEntry{}
	}
	for _, a := range addrs {
		k := bookKey{client.Unmap(), a}
		e := b.entries[k]
		found := false
		for _, n := range e.names {
			found = found || n == name
		}
		if !found {
			e.names = append(e.names, name)
		}
		e.expires = exp
		b.entries[k] = e
	}
}

// Names returns the names client looked up that resolved to addr.
func (b *AddrBook) Names(client, addr netip.Addr) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[bookKey{client.Unmap(), addr.Unmap()}]
	if !ok || b.now().After(e.expires) {
		return nil
	}
	return append([]string(nil), e.names...)
}

// Lookuper resolves names; *Resolver implements it.
type Lookuper interface {
	Lookup(ctx context.Context, name string) ([]netip.Addr, time.Duration, error)
}

// Server answers the sandbox's DNS queries under the current policy.
type Server struct {
	// Policy returns the current policy (required).
	Policy func() *policy.Policy
	// Resolver resolves allowed names (required).
	Resolver Lookuper
	// Book, if set, records the answers given.
	Book *AddrBook
	// Receipt, if set, is called once per response with its decision
	// (scrubbed of secrets when Secrets is set).
	Receipt func(receipts.Record)
	// Secrets, if set, returns the current secrets: a query name holding a
	// placeholder or a real value is refused, and receipts are scrubbed.
	Secrets func() *secrets.Session
	// Session names the session in receipts.
	Session string
	// Sinkhole, if set, returns the block answer's address: a denied name
	// (and an allowed name whose addresses are all refused as non-public)
	// gets an A record for it instead of NXDOMAIN, so that the client
	// connects and the gateway, which receives every connection of the
	// sandbox, refuses it with a message naming the host and the rule. An
	// invalid address means NXDOMAIN.
	Sinkhole func() netip.Addr

	mu      sync.Mutex
	servers []*mdns.Server
}

// ServeDNS implements mdns.Handler. A panic while answering one query is
// contained: the query gets SERVFAIL and the server keeps running.
func (s *Server) ServeDNS(w mdns.ResponseWriter, req *mdns.Msg) {
	var resp *mdns.Msg
	func() {
		defer func() {
			if v := recover(); v != nil {
				resp = new(mdns.Msg)
				resp.SetRcode(req, mdns.RcodeServerFailure)
				rec := receipts.Record{Session: s.Session, Protocol: "dns", Rule: policy.NoRule, Decision: receipts.Deny,
					Reason: "internal error while answering: SERVFAIL"}
				if c := clientAddr(w.RemoteAddr()); c.IsValid() {
					rec.Client = c.String()
				}
				s.receipt(rec)
			}
		}()
		resp = s.answer(w.RemoteAddr(), req)
	}()
	if opt := req.IsEdns0(); opt != nil {
		resp.SetEdns0(1232, false)
	}
	if err := w.WriteMsg(resp); err != nil {
		// The client went away; nothing to do.
		_ = err
	}
}

// receipt scrubs and records one decision.
func (s *Server) receipt(rec receipts.Record) {
	if s.Receipt == nil {
		return
	}
	if s.Secrets != nil {
		if sess := s.Secrets(); sess.Len() > 0 {
			rec = rec.Scrub(sess.Scrub)
		}
	}
	s.Receipt(rec)
}

// acceptMsg lets every query reach ServeDNS, which answers (and receipts)
// malformed ones itself; only responses are ignored (no reply is sent).
func acceptMsg(dh mdns.Header) mdns.MsgAcceptAction {
	if dh.Bits&(1<<15) != 0 { // QR: a response, not a query
		return mdns.MsgIgnore
	}
	return mdns.MsgAccept
}

// invalidMsg records the FORMERR the DNS library sends on its own for a
// query whose header parsed but whose body did not (shorter messages get no
// reply).
func (s *Server) invalidMsg(m []byte, err error) {
	const headerLen = 12
	if len(m) < headerLen || errors.Is(err, mdns.ErrShortRead) {
		return
	}
	s.receipt(receipts.Record{Session: s.Session, Protocol: "dns", Rule: policy.NoRule, Decision: receipts.Deny,
		Reason: "malformed query: FORMERR"})
}

func clientAddr(a net.Addr) netip.Addr {
	switch v := a.(type) {
	case *net.UDPAddr:
		ap := v.AddrPort()
		return ap.Addr().Unmap()
	case *net.TCPAddr:
		ap := v.AddrPort()
		return ap.Addr().Unmap()
	case *net.UnixAddr:
		// The DNS relay of a native fence: its namespace's connections
		// reach the gateway with the source 127.0.0.1 (the forwarder's
		// PROXY header), so its answers are remembered for that client.
		return netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return netip.Addr{}
}

func (s *Server) answer(remote net.Addr, req *mdns.Msg) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	rec := receipts.Record{Session: s.Session, Protocol: "dns", Rule: policy.NoRule, Decision: receipts.Deny}
	client := clientAddr(remote)
	if client.IsValid() {
		rec.Client = client.String()
	}
	emit := func(reason string, rcode int) *mdns.Msg {
		rec.Reason = reason
		m.Rcode = rcode
		s.receipt(rec)
		return m
	}
	if req.Opcode != mdns.OpcodeQuery {
		return emit("opcode "+mdns.OpcodeToString[req.Opcode]+" not supported", mdns.RcodeNotImplemented)
	}
	if len(req.Question) != 1 {
		return emit("query must have exactly one question", mdns.RcodeFormatError)
	}
	q := req.Question[0]
	rec.Method = mdns.TypeToString[q.Qtype]
	rec.Host = strings.ToValidUTF8(q.Name, "?")
	if q.Qclass != mdns.ClassINET {
		return emit("class "+mdns.ClassToString[q.Qclass]+" refused", mdns.RcodeRefused)
	}
	h, err := policy.NormalizeHost(q.Name)
	if err != nil || h.IsIP() {
		return emit("malformed or IP name: not resolved", mdns.RcodeNameError)
	}
	rec.Host = h.Name
	if s.Secrets != nil {
		if err := s.Secrets().CheckName(h.Name); err != nil {
			return emit(err.Error()+": NXDOMAIN, not forwarded", mdns.RcodeNameError)
		}
	}
	pol := s.Policy()
	if !pol.AllowsName(h.Name) {
		if sink := s.sinkhole(); sink.IsValid() {
			return emit(s.blockAnswer(m, q, client, h.Name, sink, "no rule allows this name: sinkhole, not forwarded"), mdns.RcodeSuccess)
		}
		return emit("no rule allows this name: NXDOMAIN, not forwarded", mdns.RcodeNameError)
	}
	rec.Decision = receipts.Allow
	if q.Qtype != mdns.TypeA && q.Qtype != mdns.TypeAAAA {
		return emit("allowed name, "+rec.Method+" not served (no data)", mdns.RcodeSuccess)
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	addrs, ttl, err := s.Resolver.Lookup(ctx, h.Name)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return emit("allowed name does not exist upstream", mdns.RcodeNameError)
		}
		rec.Decision = receipts.Deny
		return emit("upstream resolution failed: "+err.Error(), mdns.RcodeServerFailure)
	}
	var served, refused []netip.Addr
	for _, a := range addrs {
		if (q.Qtype == mdns.TypeA) != a.Is4() {
			continue
		}
		if !pol.AddrPermitted(h.Name, 0, a) {
			refused = append(refused, a)
			continue
		}
		served = append(served, a)
	}
	secs := uint32(ttl / time.Second)
	for _, a := range served {
		hdr := mdns.RR_Header{Name: q.Name, Class: mdns.ClassINET, Ttl: secs}
		if a.Is4() {
			hdr.Rrtype = mdns.TypeA
			m.Answer = append(m.Answer, &mdns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
		} else {
			hdr.Rrtype = mdns.TypeAAAA
			m.Answer = append(m.Answer, &mdns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
		}
	}
	if s.Book != nil && client.IsValid() && len(served) > 0 {
		s.Book.Remember(client, h.Name, served, ttl)
	}
	reason := fmt.Sprintf("answered %d address(es)", len(served))
	if len(refused) > 0 {
		reason += fmt.Sprintf("; refused non-public %v (no rule lists a CIDR for them)", refused)
		if len(served) == 0 {
			rec.Decision = receipts.Deny
			if sink := s.sinkhole(); sink.IsValid() {
				reason = s.blockAnswer(m, q, client, h.Name, sink, reason+": sinkhole")
			}
		}
	}
	return emit(reason, mdns.RcodeSuccess)
}

// SinkholeTTL is the TTL of block answers: short, so that a policy change
// is seen soon.
const SinkholeTTL = 5 * time.Second

func (s *Server) sinkhole() netip.Addr {
	if s.Sinkhole == nil {
		return netip.Addr{}
	}
	return s.Sinkhole()
}

// blockAnswer answers an A question with the sinkhole (AAAA and other types
// get no data: the sandbox has no IPv6) and remembers the name for the
// client, so a connection to the sinkhole without a name of its own is
// attributed to it. It returns the receipt reason.
func (s *Server) blockAnswer(m *mdns.Msg, q mdns.Question, client netip.Addr, name string, sink netip.Addr, reason string) string {
	if q.Qtype != mdns.TypeA || !sink.Is4() {
		return reason + " (no " + mdns.TypeToString[q.Qtype] + " data)"
	}
	m.Answer = append(m.Answer[:0], &mdns.A{
		Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: uint32(SinkholeTTL / time.Second)},
		A:   net.IP(sink.AsSlice()),
	})
	if s.Book != nil && client.IsValid() {
		s.Book.Remember(client, name, []netip.Addr{sink}, SinkholeTTL)
	}
	return reason + " " + sink.String()
}

// Serve answers queries on pc (UDP) and l (TCP); either may be nil. It
// returns when both have started; Shutdown stops them.
func (s *Server) Serve(pc net.PacketConn, l net.Listener) error {
	var started []chan struct{}
	errc := make(chan error, 2)
	start := func(srv *mdns.Server) {
		ch := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(ch) }
		srv.Handler = s
		srv.MsgAcceptFunc = acceptMsg
		srv.MsgInvalidFunc = s.invalidMsg
		s.mu.Lock()
		s.servers = append(s.servers, srv)
		s.mu.Unlock()
		started = append(started, ch)
		go func() { errc <- srv.ActivateAndServe() }()
	}
	if pc != nil {
		start(&mdns.Server{PacketConn: pc, UDPSize: 4096})
	}
	if l != nil {
		start(&mdns.Server{Listener: l, ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }})
	}
	for _, ch := range started {
		select {
		case <-ch:
		case err := <-errc:
			s.Shutdown()
			return fmt.Errorf("dns: serve: %w", err)
		}
	}
	return nil
}

// Shutdown stops serving.
func (s *Server) Shutdown() {
	s.mu.Lock()
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	for _, srv := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.ShutdownContext(ctx)
		cancel()
	}
}
