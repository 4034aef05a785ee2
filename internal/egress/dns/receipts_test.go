package dns

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"go.uber.org/goleak"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
	"vak/internal/receipts"
)

const secretValue = "ghp_DNSsecretValue_0123456789"

// TestEveryReplyHasOneReceipt sends well-formed and malformed messages
// over UDP and counts replies against receipts: every reply the server
// sends (including FORMERR and NOTIMP, which the DNS library would
// otherwise send on its own) has exactly one receipt, and messages that
// get no reply get none. A query name carrying a secret is refused, never
// forwarded, and its receipt names the secret instead.
func TestEveryReplyHasOneReceipt(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	up := startUpstream(t, map[string]string{"a.wild.test.": "93.184.216.34"})
	pol, err := policy.New([]policy.Rule{{Action: policy.Allow, Proto: policy.ProtoHTTP, Hosts: []policy.HostPattern{policy.MustHostPattern("*.wild.test")}}})
	if err != nil {
		t.Fatal(err)
	}
	sess := secrets.NewSession([]*secrets.Secret{secrets.NewForTest("TOKEN", secretValue, secrets.Header, "api.test")}, nil)
	ph := sess.Env()["TOKEN"]
	var mu sync.Mutex
	var recs []receipts.Record
	srv := &Server{
		Policy:   func() *policy.Policy { return pol },
		Resolver: &Resolver{Upstreams: []string{up.addr}},
		Receipt:  func(r receipts.Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() },
		Secrets:  func() *secrets.Session { return sess },
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(pc, nil); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	pack := func(m *mdns.Msg) []byte {
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	q := func(name string) *mdns.Msg { m := new(mdns.Msg); m.SetQuestion(mdns.Fqdn(name), mdns.TypeA); return m }
	twoQ := q("a.wild.test")
	twoQ.Question = append(twoQ.Question, mdns.Question{Name: "b.wild.test.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET})
	noQ := q("a.wild.test")
	noQ.Question = nil
	update := q("a.wild.test")
	update.Opcode = mdns.OpcodeUpdate
	resp := q("a.wild.test")
	resp.Response = true
	valid := pack(q("a.wild.test"))
	cases := []struct {
		name  string
		msg   []byte
		reply bool
		rcode int
	}{
		{"valid", valid, true, mdns.RcodeSuccess},
		{"two questions", pack(twoQ), true, mdns.RcodeFormatError},
		{"no question", pack(noQ), true, mdns.RcodeFormatError},
		{"update opcode", pack(update), true, mdns.RcodeNotImplemented},
		{"truncated question", valid[:len(valid)-3], true, mdns.RcodeFormatError},
		{"real value in the name", pack(q(strings.ToLower(secretValue) + ".wild.test")), true, mdns.RcodeNameError},
		{"placeholder in the name", pack(q(ph + ".wild.test")), true, mdns.RcodeNameError},
		{"a response", pack(resp), false, 0},
		{"shorter than a header", valid[:5], false, 0},
	}
	replies := 0
	for _, tc := range cases {
		c, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(tc.msg)
		wait := 5 * time.Second
		if !tc.reply {
			// Waiting for something that must not come: bounded.
			wait = 300 * time.Millisecond
		}
		c.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		c.Close()
		if (err == nil) != tc.reply {
			t.Fatalf("%s: reply=%v (%v), want %v", tc.name, err == nil, err, tc.reply)
		}
		if err != nil {
			continue
		}
		replies++
		var m mdns.Msg
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatalf("%s: reply does not parse: %v", tc.name, err)
		}
		if m.Rcode != tc.rcode {
			t.Errorf("%s: rcode %s, want %s", tc.name, mdns.RcodeToString[m.Rcode], mdns.RcodeToString[tc.rcode])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(recs) != replies {
		t.Fatalf("%d replies but %d receipts: %+v", replies, len(recs), recs)
	}
	for _, r := range recs {
		s := strings.ToLower(r.Host + r.Reason + r.Method)
		if strings.Contains(s, strings.ToLower(secretValue)) || strings.Contains(s, ph) {
			t.Fatalf("receipt holds a secret: %+v", r)
		}
	}
	var scrubbed int
	for _, r := range recs {
		if r.Host == "[secret:TOKEN].wild.test" || r.Host == "[placeholder:TOKEN].wild.test" {
			scrubbed++
		}
	}
	if scrubbed != 2 {
		t.Errorf("%d scrubbed host receipts, want 2: %+v", scrubbed, recs)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, n := range up.seen {
		if strings.Contains(strings.ToLower(n), strings.ToLower(secretValue)) || strings.Contains(n, ph) {
			t.Fatalf("a secret reached the upstream resolver: %s", n)
		}
	}
	if len(up.seen) == 0 {
		t.Fatal("control query did not reach the upstream")
	}
	_ = netip.Addr{}
}
