package dns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"go.uber.org/goleak"

	"vak/internal/egress/policy"
	"vak/internal/receipts"
)

// countingUpstream is a real DNS server on loopback that counts every query
// it receives and answers from a fixed table.
type countingUpstream struct {
	addr    string
	queries atomic.Int64
	mu      sync.Mutex
	seen    []string
	srv     *mdns.Server
}

func startUpstream(t *testing.T, table map[string]string) *countingUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &countingUpstream{addr: pc.LocalAddr().String()}
	started := make(chan struct{})
	u.srv = &mdns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) }, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		u.queries.Add(1)
		q := r.Question[0]
		u.mu.Lock()
		u.seen = append(u.seen, q.Name)
		u.mu.Unlock()
		m := new(mdns.Msg)
		m.SetReply(r)
		ip, ok := table[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = mdns.RcodeNameError
		} else if a := net.ParseIP(ip); a.To4() != nil && q.Qtype == mdns.TypeA {
			m.Answer = append(m.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 30}, A: a})
		} else if a.To4() == nil && q.Qtype == mdns.TypeAAAA {
			m.Answer = append(m.Answer, &mdns.AAAA{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeAAAA, Class: mdns.ClassINET, Ttl: 30}, AAAA: a})
		}
		w.WriteMsg(m)
	})}
	go u.srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { u.srv.Shutdown() })
	return u
}

func randomName() string {
	var b [8]byte
	rand.Read(b[:])
	return "exfil-" + hex.EncodeToString(b[:]) + ".attacker.test"
}

func TestServerAnswersOnlyAllowedNames(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	up := startUpstream(t, map[string]string{
		"allowed.test.":  "93.184.216.34",
		"private.test.":  "10.0.0.1",
		"internal.test.": "10.9.0.7",
		"v6.test.":       "2606:4700::1",
	})
	rules := []policy.Rule{
		{Action: policy.Allow, Proto: policy.ProtoHTTP, Hosts: []policy.HostPattern{policy.MustHostPattern("allowed.test"), policy.MustHostPattern("private.test"), policy.MustHostPattern("v6.test"), policy.MustHostPattern("override.test")}},
		{Action: policy.Allow, Proto: policy.ProtoHTTP, Hosts: []policy.HostPattern{policy.MustHostPattern("internal.test")}, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}},
	}
	pol, err := policy.New(rules)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var recs []receipts.Record
	book := &AddrBook{}
	srv := &Server{
		Policy:   func() *policy.Policy { return pol },
		Resolver: &Resolver{Upstreams: []string{up.addr}, Overrides: map[string][]netip.Addr{"override.test": {netip.MustParseAddr("198.51.99.9")}}},
		Book:     book,
		Receipt:  func(r receipts.Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() },
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(pc, l); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	query := func(netw, name string, qt uint16) *mdns.Msg {
		t.Helper()
		m := new(mdns.Msg)
		m.SetQuestion(mdns.Fqdn(name), qt)
		c := &mdns.Client{Net: netw, Timeout: 5 * time.Second}
		addr := pc.LocalAddr().String()
		if netw == "tcp" {
			addr = l.Addr().String()
		}
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatalf("query %s %s: %v", netw, name, err)
		}
		return r
	}

	// Control: an allowed name is resolved upstream and answered.
	r := query("udp", "Allowed.Test.", mdns.TypeA)
	if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*mdns.A).A.String() != "93.184.216.34" {
		t.Fatalf("allowed name: %v", r)
	}
	if up.queries.Load() == 0 {
		t.Fatal("control query did not reach the upstream: the test proves nothing")
	}
	if names := book.Names(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("93.184.216.34")); len(names) != 1 || names[0] != "allowed.test" {
		t.Fatalf("address book: %v", names)
	}

	// Attack: denied random names over UDP and TCP, A and TXT, never reach
	// the upstream.
	before := up.queries.Load()
	for _, netw := range []string{"udp", "tcp"} {
		for _, qt := range []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeTXT, mdns.TypeMX} {
			name := randomName()
			r := query(netw, name, qt)
			if r.Rcode != mdns.RcodeNameError || len(r.Answer) != 0 {
				t.Fatalf("denied name %s answered: %v", name, r)
			}
		}
	}
	// Names that only look allowed.
	for _, name := range []string{"allowed.test.attacker.test", "x.allowed.test", "allowed.test\\000.attacker.test", "1.2.3.4"} {
		if r := query("udp", name, mdns.TypeA); r.Rcode != mdns.RcodeNameError {
			t.Fatalf("lookalike %q answered: %v", name, r)
		}
	}
	if got := up.queries.Load(); got != before {
		t.Fatalf("denied queries reached the upstream: %d new queries (%v)", got-before, up.seen)
	}

	// TXT for an allowed name is not forwarded either (no data).
	if r := query("udp", "allowed.test", mdns.TypeTXT); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("TXT: %v", r)
	}
	if got := up.queries.Load(); got != before {
		t.Fatal("TXT query was forwarded")
	}

	// Private answers are refused unless a rule lists their CIDR.
	if r := query("tcp", "private.test", mdns.TypeA); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("private answer served: %v", r)
	}
	if r := query("udp", "internal.test", mdns.TypeA); len(r.Answer) != 1 {
		t.Fatalf("CIDR-allowed private answer missing: %v", r)
	}
	if r := query("udp", "v6.test", mdns.TypeAAAA); len(r.Answer) != 1 {
		t.Fatalf("AAAA: %v", r)
	}
	// Overrides answer without upstream.
	before = up.queries.Load()
	if r := query("udp", "override.test", mdns.TypeA); len(r.Answer) != 1 || r.Answer[0].(*mdns.A).A.String() != "198.51.99.9" {
		t.Fatalf("override: %v", r)
	}
	if up.queries.Load() != before {
		t.Fatal("override went upstream")
	}
	mu.Lock()
	defer mu.Unlock()
	var denies int
	for _, rec := range recs {
		if rec.Protocol != "dns" || rec.Reason == "" {
			t.Fatalf("bad receipt %+v", rec)
		}
		if rec.Decision == receipts.Deny {
			denies++
		}
	}
	if denies < 12 {
		t.Fatalf("only %d deny receipts", denies)
	}
}

func TestResolverCacheAndCNAME(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	started := make(chan struct{})
	srv := &mdns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) }, Handler: mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		n.Add(1)
		m := new(mdns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		if q.Qtype == mdns.TypeA {
			m.Answer = append(m.Answer,
				&mdns.CNAME{Hdr: mdns.RR_Header{Name: q.Name, Rrtype: mdns.TypeCNAME, Class: mdns.ClassINET, Ttl: 60}, Target: "edge.cdn.test."},
				&mdns.A{Hdr: mdns.RR_Header{Name: "unrelated.test.", Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60}, A: net.ParseIP("6.6.6.6")},
				&mdns.A{Hdr: mdns.RR_Header{Name: "edge.cdn.test.", Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60}, A: net.ParseIP("93.184.216.34")})
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	<-started
	defer srv.Shutdown()
	r := &Resolver{Upstreams: []string{pc.LocalAddr().String()}}
	addrs, _, err := r.Lookup(context.Background(), "www.example.test")
	if err != nil || len(addrs) != 1 || addrs[0].String() != "93.184.216.34" {
		t.Fatalf("Lookup = %v %v (records off the CNAME chain must be ignored)", addrs, err)
	}
	q := n.Load()
	if _, _, err := r.Lookup(context.Background(), "www.example.test"); err != nil || n.Load() != q {
		t.Fatalf("second lookup not cached: %v", err)
	}
}
