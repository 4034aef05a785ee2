package dns

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"vak/internal/egress/policy"
	"vak/internal/receipts"
)

// With a sinkhole, denied names (and allowed names that resolve only to
// refused non-public addresses) get the sinkhole's A record, never a query
// upstream; AAAA and other types get no data. Allowed names are unchanged.
func TestSinkholeBlockAnswer(t *testing.T) {
	up := startUpstream(t, map[string]string{
		"allowed.test.": "93.184.216.34",
		"private.test.": "10.0.0.1",
	})
	pol, err := policy.New([]policy.Rule{{Action: policy.Allow, Proto: policy.ProtoHTTP,
		Hosts: []policy.HostPattern{policy.MustHostPattern("allowed.test"), policy.MustHostPattern("private.test")}}})
	if err != nil {
		t.Fatal(err)
	}
	sink := netip.MustParseAddr("198.18.0.1")
	var nxdomain atomic.Bool
	var mu sync.Mutex
	var recs []receipts.Record
	book := &AddrBook{}
	srv := &Server{
		Policy:   func() *policy.Policy { return pol },
		Resolver: &Resolver{Upstreams: []string{up.addr}},
		Book:     book,
		Receipt:  func(r receipts.Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() },
		Sinkhole: func() netip.Addr {
			if nxdomain.Load() {
				return netip.Addr{}
			}
			return sink
		},
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(pc, nil); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	query := func(name string, qt uint16) *mdns.Msg {
		t.Helper()
		m := new(mdns.Msg)
		m.SetQuestion(mdns.Fqdn(name), qt)
		r, _, err := (&mdns.Client{Timeout: 5 * time.Second}).Exchange(m, pc.LocalAddr().String())
		if err != nil {
			t.Fatalf("query %s: %v", name, err)
		}
		return r
	}
	onlyA := func(r *mdns.Msg) string {
		if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
			return ""
		}
		a, ok := r.Answer[0].(*mdns.A)
		if !ok {
			return ""
		}
		return a.A.String()
	}
	// Control: an allowed public name is answered from upstream.
	if got := onlyA(query("allowed.test", mdns.TypeA)); got != "93.184.216.34" {
		t.Fatalf("allowed name: %q", got)
	}
	before := up.queries.Load()
	for _, name := range []string{randomName(), "x.allowed.test", "allowed.test.attacker.test"} {
		if got := onlyA(query(name, mdns.TypeA)); got != sink.String() {
			t.Errorf("denied %s: A %q, want the sinkhole", name, got)
		}
		for _, qt := range []uint16{mdns.TypeAAAA, mdns.TypeTXT, mdns.TypeMX} {
			if r := query(name, qt); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 0 {
				t.Errorf("denied %s %s: %v", name, mdns.TypeToString[qt], r)
			}
		}
	}
	if got := up.queries.Load(); got != before {
		t.Fatalf("denied names were forwarded upstream: %d queries", got-before)
	}
	if names := book.Names(netip.MustParseAddr("127.0.0.1"), sink); len(names) != 3 {
		t.Errorf("the address book does not attribute the sinkhole to the denied names: %v", names)
	}
	// An allowed name resolving only to a refused private address.
	if got := onlyA(query("private.test", mdns.TypeA)); got != sink.String() {
		t.Errorf("non-public answer: A %q, want the sinkhole", got)
	}
	// nxdomain as the configured choice.
	nxdomain.Store(true)
	if r := query(randomName(), mdns.TypeA); r.Rcode != mdns.RcodeNameError {
		t.Errorf("nxdomain mode: %v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	var denied, private bool
	for _, r := range recs {
		denied = denied || (r.Decision == receipts.Deny && strings.Contains(r.Reason, "sinkhole, not forwarded 198.18.0.1"))
		private = private || (r.Host == "private.test" && r.Decision == receipts.Deny && strings.Contains(r.Reason, "refused non-public [10.0.0.1]") && strings.Contains(r.Reason, "sinkhole"))
	}
	if !denied || !private {
		t.Errorf("receipts do not record the block answers: %+v", recs)
	}
}
