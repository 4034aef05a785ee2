package agentnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/config"
	"vak/internal/receipts"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type env struct {
	b       *Broker
	clk     *clock
	log     *receipts.Log
	logPath string
	dir     string
	ws      map[string]string // name -> canonical path
}

// newEnv starts a broker with workspaces named by names (directories
// created under a temp dir).
func newEnv(t *testing.T, names ...string) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{clk: &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, dir: dir, ws: map[string]string{}}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		c, err := Canonical(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ws[n] = c
	}
	e.logPath = filepath.Join(dir, "state", "receipts.jsonl")
	if err := os.MkdirAll(filepath.Dir(e.logPath), 0o700); err != nil {
		t.Fatal(err)
	}
	log, err := receipts.Open(e.logPath)
	if err != nil {
		t.Fatal(err)
	}
	e.log = log
	t.Cleanup(func() { log.Close() })
	b, err := New(Options{StateDir: filepath.Join(dir, "state", "agentnet"), Receipts: log, UID: 1000, Now: e.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	e.b = b
	return e
}

func (e *env) policy(name string, enabled bool, q Quota, peers ...string) Policy {
	p := Policy{Workspace: e.ws[name], Enabled: enabled, Quota: q}
	for _, n := range peers {
		p.Peers = append(p.Peers, e.ws[n])
	}
	return p
}

// allow gives each named workspace an enabled policy without peers on b
// (e's broker when nil): only workspaces with a policy register.
func (e *env) allow(t *testing.T, b *Broker, names ...string) {
	t.Helper()
	if b == nil {
		b = e.b
	}
	var ps []Policy
	for _, n := range names {
		ps = append(ps, e.policy(n, true, Quota{}))
	}
	if err := b.SetPolicies(ps); err != nil {
		t.Fatal(err)
	}
}

func (e *env) register(t *testing.T, name string) (string, Identity) {
	t.Helper()
	tok, id, err := e.b.Register(e.ws[name], 1000)
	if err != nil {
		t.Fatal(err)
	}
	return tok, id
}

// records returns the log's records after a Sync, and checks the chain.
func (e *env) records(t *testing.T) []receipts.Record {
	t.Helper()
	if err := e.log.Sync(); err != nil {
		t.Fatal(err)
	}
	rep, err := receipts.VerifyFile(e.logPath)
	if err != nil || !rep.OK() {
		t.Fatalf("receipts do not verify: %v %+v", err, rep)
	}
	data, err := os.ReadFile(e.logPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []receipts.Record
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l == "" {
			continue
		}
		var r receipts.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func hasRecord(rs []receipts.Record, method, decision, reasonPart string) bool {
	for _, r := range rs {
		if r.Method == method && r.Decision == decision && strings.Contains(r.Reason, reasonPart) {
			return true
		}
	}
	return false
}

func TestMutualApproval(t *testing.T) {
	tests := []struct {
		name     string
		policies func(e *env) []Policy
		wantUp   bool
		reason   string
	}{
		{"both name each other", func(e *env) []Policy {
			return []Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")}
		}, true, ""},
		{"A lists B, B does not list A", func(e *env) []Policy {
			return []Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{})}
		}, false, "does not list"},
		{"B has no policy", func(e *env) []Policy {
			return []Policy{e.policy("a", true, Quota{}, "b")}
		}, false, "has no agent_network policy"},
		{"B disabled", func(e *env) []Policy {
			return []Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", false, Quota{}, "a")}
		}, false, "disabled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "a", "b")
			// Both register while their policies allow it; then the
			// case's policies apply (a reload).
			e.allow(t, nil, "a", "b")
			ta, _ := e.register(t, "a")
			tb, _ := e.register(t, "b")
			if err := e.b.SetPolicies(tc.policies(e)); err != nil {
				t.Fatal(err)
			}
			_, err := e.b.Send(ta, e.ws["b"], "t", []byte("hi"))
			if tc.wantUp {
				if err != nil {
					t.Fatalf("send on a live edge: %v", err)
				}
				m, err := e.b.Receive(context.Background(), tb, "t", "", time.Second)
				if err != nil || string(m.Body) != "hi" {
					t.Fatalf("receive = %+v, %v", m, err)
				}
				if !e.b.Live(ta) || !e.b.Live(tb) {
					t.Fatal("Live false on a live edge")
				}
				return
			}
			if !errors.Is(err, ErrNoEdge) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("send err = %v, want ErrNoEdge naming %q", err, tc.reason)
			}
			if e.b.Live(ta) {
				t.Fatal("Live true without an edge")
			}
			if !hasRecord(e.records(t), "message", receipts.Deny, tc.reason) {
				t.Fatal("no refusal receipt")
			}
		})
	}
}

func TestDestinationValidation(t *testing.T) {
	e := newEnv(t, "a", "b", "c")
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "a", "b"), e.policy("b", true, Quota{}, "a")})
	ta, ida := e.register(t, "a")
	e.register(t, "b")
	for _, dst := range []string{ida.ID, e.ws["a"], e.ws["c"], "ws-0000", "/nonexistent/x", ""} {
		if _, err := e.b.Send(ta, dst, "t", nil); !errors.Is(err, ErrDestination) {
			t.Errorf("send to %q: err = %v, want ErrDestination", dst, err)
		}
	}
	if _, err := e.b.Send(ta, e.ws["b"], "", nil); !errors.Is(err, ErrBadRequest) {
		t.Errorf("empty topic: %v", err)
	}
	if _, err := e.b.Send(ta, e.ws["b"], "t", nil); err != nil { // positive control
		t.Errorf("send to b: %v", err)
	}
}

func TestTokens(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")})
	e.register(t, "b")
	good, _ := e.register(t, "a")
	if _, err := e.b.Peers(good); err != nil { // positive control
		t.Fatal(err)
	}
	other, err := New(Options{StateDir: e.b.dir, Receipts: e.log, UID: 1000, Audience: "another", Now: e.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	e.allow(t, other, "a")
	otherTok, _, err := other.Register(e.ws["a"], 1000)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := parse(e.b.key, good)
	c.Identity = "ws-forged"
	forgedClaims := sign([]byte(strings.Repeat("k", 32)), c)
	c2, _ := parse(e.b.key, good)
	c2.Expiry += 3600
	p, _, _ := strings.Cut(strings.TrimPrefix(sign(e.b.key, c2), tokenPrefix), ".")
	_, sig, _ := strings.Cut(strings.TrimPrefix(good, tokenPrefix), ".")
	spliced := tokenPrefix + p + "." + sig

	revokedTok, _ := e.register(t, "a")
	if err := e.b.Unregister(revokedTok); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tok, want string
	}{
		{"forged key", forgedClaims, "bad signature"},
		{"edited claims", spliced, "bad signature"},
		{"garbage", "not a token", "malformed"},
		{"wrong audience", otherTok, "audience"},
		{"replayed after revocation", revokedTok, "revoked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.b.Peers(tc.tok)
			if !errors.Is(err, ErrToken) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrToken %q", err, tc.want)
			}
			if strings.Contains(err.Error(), tc.tok) {
				t.Fatal("error contains the token")
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		e.clk.add(DefaultTokenTTL + time.Second)
		_, err := e.b.Peers(good)
		if !errors.Is(err, ErrToken) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no token in receipts", func(t *testing.T) {
		rs := e.records(t)
		data, _ := os.ReadFile(e.logPath)
		for _, tok := range []string{good, revokedTok, otherTok} {
			_, sig, _ := strings.Cut(strings.TrimPrefix(tok, tokenPrefix), ".")
			if strings.Contains(string(data), sig) {
				t.Fatal("receipts contain a token signature")
			}
		}
		if !hasRecord(rs, "peers", receipts.Deny, "revoked") {
			t.Fatal("no refusal receipt for the replayed token")
		}
	})
}

func TestRenew(t *testing.T) {
	e := newEnv(t, "a")
	e.allow(t, nil, "a")
	tok, _ := e.register(t, "a")
	e.clk.add(DefaultTokenTTL - time.Second)
	tok2, err := e.b.Renew(tok)
	if err != nil {
		t.Fatal(err)
	}
	e.clk.add(2 * time.Second)
	if _, err := e.b.Peers(tok); !errors.Is(err, ErrToken) {
		t.Fatalf("old token after its expiry: %v", err)
	}
	if _, err := e.b.Peers(tok2); err != nil {
		t.Fatalf("renewed token: %v", err)
	}
}

func TestIdentityPersistsAndBindsUID(t *testing.T) {
	e := newEnv(t, "a")
	e.allow(t, nil, "a")
	_, id := e.register(t, "a")
	b2, err := New(Options{StateDir: e.b.dir, Receipts: e.log, UID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	e.allow(t, b2, "a")
	_, id2, err := b2.Register(e.ws["a"], 1000)
	if err != nil || id2.ID != id.ID {
		t.Fatalf("identity not persisted: %v %v %v", id, id2, err)
	}
	if _, _, err := b2.Register(e.ws["a"], 1001); !errors.Is(err, ErrRegister) || !strings.Contains(err.Error(), "uid 1001") {
		t.Fatalf("other uid: %v", err)
	}
	b3, err := New(Options{StateDir: e.b.dir, Receipts: e.log, UID: 1001})
	if err != nil {
		t.Fatal(err)
	}
	e.allow(t, b3, "a")
	if _, _, err := b3.Register(e.ws["a"], 1001); !errors.Is(err, ErrRegister) || !strings.Contains(err.Error(), "belongs to uid 1000") {
		t.Fatalf("identity of another uid: %v", err)
	}
	for _, f := range []string{"identities.json", "token.key"} {
		st, err := os.Stat(filepath.Join(e.b.dir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st.Mode(), err)
		}
	}
	// Symlinked paths are the same workspace.
	link := filepath.Join(e.dir, "link")
	if err := os.Symlink(e.ws["a"], link); err != nil {
		t.Fatal(err)
	}
	if _, id3, err := b2.Register(link, 1000); err != nil || id3.ID != id.ID {
		t.Fatalf("symlink: %v %v", id3, err)
	}
}

func TestQuotas(t *testing.T) {
	q := Quota{PerMinute: 5, MaxBytes: 16, QueueDepth: 3}
	tests := []struct {
		name string
		run  func(e *env, ta string) error
		want string
	}{
		{"size", func(e *env, ta string) error {
			_, err := e.b.Send(ta, e.ws["b"], "t", make([]byte, 17))
			return err
		}, "exceeds"},
		{"queue depth", func(e *env, ta string) error {
			for range 3 {
				if _, err := e.b.Send(ta, e.ws["b"], "t", nil); err != nil {
					return err
				}
			}
			_, err := e.b.Send(ta, e.ws["b"], "t", nil)
			return err
		}, "queue depth"},
		{"rate", func(e *env, ta string) error {
			for range 5 {
				if _, err := e.b.Send(ta, e.ws["b"], "t", nil); err != nil && !errors.Is(err, ErrQuota) {
					return err
				}
				e.b.mu.Lock()
				e.b.queues[edgeKey{e.b.idents[e.ws["a"]].ID, e.b.idents[e.ws["b"]].ID}].msgs = nil // drain
				e.b.mu.Unlock()
			}
			_, err := e.b.Send(ta, e.ws["b"], "t", nil)
			return err
		}, "per minute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "a", "b")
			e.b.SetPolicies([]Policy{e.policy("a", true, q, "b"), e.policy("b", true, Quota{}, "a")})
			ta, _ := e.register(t, "a")
			e.register(t, "b")
			if _, err := e.b.Send(ta, e.ws["b"], "t", make([]byte, 16)); err != nil { // positive control
				t.Fatal(err)
			}
			e.b.mu.Lock()
			for _, qq := range e.b.queues {
				qq.msgs, qq.sent = nil, nil
			}
			e.b.mu.Unlock()
			err := tc.run(e, ta)
			if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrQuota %q", err, tc.want)
			}
			if !hasRecord(e.records(t), "message", receipts.Deny, tc.want) {
				t.Fatal("no refusal receipt")
			}
		})
	}
	t.Run("rate window slides", func(t *testing.T) {
		e := newEnv(t, "a", "b")
		e.b.SetPolicies([]Policy{e.policy("a", true, Quota{PerMinute: 1}, "b"), e.policy("b", true, Quota{}, "a")})
		ta, _ := e.register(t, "a")
		e.register(t, "b")
		if _, err := e.b.Send(ta, e.ws["b"], "t", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.b.Send(ta, e.ws["b"], "t", nil); !errors.Is(err, ErrQuota) {
			t.Fatal(err)
		}
		e.clk.add(time.Minute)
		if _, err := e.b.Renew(ta); err != nil {
			t.Fatal(err)
		}
	})
}

// TestNoStarvation: A fills its edge to B to the limits; C's edge to B is
// unaffected, and B's receives alternate between the edges.
func TestNoStarvation(t *testing.T) {
	e := newEnv(t, "a", "b", "c")
	q := Quota{PerMinute: 1000, QueueDepth: 10}
	e.b.SetPolicies([]Policy{e.policy("a", true, q, "b"), e.policy("b", true, q, "a", "c"), e.policy("c", true, q, "b")})
	ta, ida := e.register(t, "a")
	tb, _ := e.register(t, "b")
	tc, idc := e.register(t, "c")
	for {
		if _, err := e.b.Send(ta, e.ws["b"], "t", []byte("a")); errors.Is(err, ErrQuota) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.b.Send(tc, e.ws["b"], "t", []byte("c")); err != nil {
		t.Fatalf("C starved by A's full edge: %v", err)
	}
	from := map[string]int{}
	for range 2 {
		m, err := e.b.Receive(context.Background(), tb, "t", "", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		from[m.From]++
	}
	if from[ida.ID] != 1 || from[idc.ID] != 1 {
		t.Fatalf("two receives took %v; want one from each edge", from)
	}
}

func TestRequestReply(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")})
	ta, _ := e.register(t, "a")
	tb, idb := e.register(t, "b")
	corr, err := e.b.Request(ta, idb.ID, "q", []byte("2+2?"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Message, 1)
	go func() {
		m, err := e.b.Receive(context.Background(), ta, "q", corr, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	m, err := e.b.Receive(context.Background(), tb, "q", "", time.Second)
	if err != nil || m.Kind != "request" || m.Correlation != corr {
		t.Fatalf("request = %+v, %v", m, err)
	}
	if err := e.b.Reply(ta, corr, []byte("self")); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("requester replying to its own request: %v", err)
	}
	if err := e.b.Reply(tb, corr, []byte("4")); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Kind != "reply" || string(r.Body) != "4" || r.Correlation != corr {
		t.Fatalf("reply = %+v", r)
	}
	if err := e.b.Reply(tb, corr, []byte("again")); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("second reply: %v", err)
	}
	if _, err := e.b.Receive(context.Background(), ta, "q", "", 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("empty receive: %v", err)
	}
}

func TestRevocation(t *testing.T) {
	revokers := []struct {
		name string
		do   func(e *env, ta, tb string) error
	}{
		{"revoke B", func(e *env, ta, tb string) error { _, err := e.b.Revoke(e.ws["b"]); return err }},
		{"B unregisters", func(e *env, ta, tb string) error { return e.b.Unregister(tb) }},
		{"B drops A from its policy", func(e *env, ta, tb string) error {
			return e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{})})
		}},
	}
	for _, rv := range revokers {
		t.Run(rv.name+"/waiting receive", func(t *testing.T) {
			e := newEnv(t, "a", "b")
			e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")})
			ta, _ := e.register(t, "a")
			tb, _ := e.register(t, "b")
			done := make(chan error, 1)
			go func() {
				_, err := e.b.Receive(context.Background(), ta, "t", "", time.Hour)
				done <- err
			}()
			waitFor(t, func() bool { e.b.mu.Lock(); defer e.b.mu.Unlock(); return len(e.b.waiters) == 1 })
			if err := rv.do(e, ta, tb); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, ErrRevoked) {
				t.Fatalf("waiting receive ended with %v, want ErrRevoked", err)
			}
			if e.b.Live(ta) {
				t.Fatal("A still live after its only edge closed")
			}
		})
		t.Run(rv.name+"/queued messages", func(t *testing.T) {
			e := newEnv(t, "a", "b")
			e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")})
			ta, _ := e.register(t, "a")
			tb, _ := e.register(t, "b")
			for range 3 {
				if _, err := e.b.Send(ta, e.ws["b"], "t", []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			if err := rv.do(e, ta, tb); err != nil {
				t.Fatal(err)
			}
			e.b.mu.Lock()
			n := len(e.b.queues)
			e.b.mu.Unlock()
			if n != 0 {
				t.Fatalf("%d queues left after revocation", n)
			}
			rs := e.records(t)
			drops := 0
			for _, r := range rs {
				if r.Method == "drop" {
					drops++
				}
			}
			if drops != 3 || !hasRecord(rs, "edge-down", receipts.Deny, "") {
				t.Fatalf("drops = %d, want 3 and an edge-down receipt", drops)
			}
			if _, err := e.b.Send(ta, e.ws["b"], "t", nil); err == nil {
				t.Fatal("send after revocation succeeded")
			}
		})
	}
}

func TestEdges(t *testing.T) {
	e := newEnv(t, "a", "b", "c")
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b", "c"), e.policy("b", true, Quota{MaxBytes: 10}, "a")})
	e.register(t, "a")
	e.register(t, "b")
	es := e.b.Edges()
	if len(es) != 2 {
		t.Fatalf("edges = %+v", es)
	}
	for _, s := range es {
		switch {
		case s.B == e.ws["b"] || s.A == e.ws["b"]:
			if !s.Up || s.Quota.MaxBytes != 10 {
				t.Errorf("a-b: %+v", s)
			}
		default:
			if s.Up || !strings.Contains(s.Reason, "no agent_network policy") {
				t.Errorf("a-c: %+v", s)
			}
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPoliciesFromConfig(t *testing.T) {
	e := newEnv(t, "a", "b")
	cfg, err := config.Parse("u.toml", []byte(fmt.Sprintf("version = 1\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\nqueue_depth = 1\n[[agent_network.workspace]]\npath = %q\npeers = [%q]\n", e.ws["a"], e.ws["b"], e.ws["b"], e.ws["a"])))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.b.SetPolicies(PoliciesFromConfig(cfg.AgentNetwork)); err != nil {
		t.Fatal(err)
	}
	ta, _ := e.register(t, "a")
	e.register(t, "b")
	if _, err := e.b.Send(ta, e.ws["b"], "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Send(ta, e.ws["b"], "t", nil); !errors.Is(err, ErrQuota) {
		t.Fatalf("queue_depth = 1 from config not enforced: %v", err)
	}
}

// TestRevokeOneTaskOfTwo: unregistering one task of a workspace fails that
// task's waiting receive, while the other task keeps the edge up.
func TestRevokeOneTaskOfTwo(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")})
	a1, _ := e.register(t, "a")
	a2, _ := e.register(t, "a")
	e.register(t, "b")
	done := make(chan error, 1)
	go func() { _, err := e.b.Receive(context.Background(), a1, "t", "", time.Hour); done <- err }()
	waitFor(t, func() bool { return e.b.Waiting() == 1 })
	if err := e.b.Unregister(a1); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrRevoked) {
		t.Fatalf("receive of the unregistered task: %v", err)
	}
	if !e.b.Live(a2) {
		t.Fatal("the other task lost its edge")
	}
	if _, err := e.b.Send(a2, e.ws["b"], "t", nil); err != nil {
		t.Fatal(err)
	}
}

// TestExpireWithoutTraffic: registrations that expire take their edges
// down at the next Expire (Run's timer) with no operation on the broker:
// an edge-down receipt is written and a waiting receive fails.
func TestExpireWithoutTraffic(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")})
	e.register(t, "a")
	tb, _ := e.register(t, "b")
	if es := e.b.Edges(); len(es) != 1 || !es[0].Up {
		t.Fatalf("edges: %+v", es)
	}
	got := make(chan error, 1)
	go func() { _, err := e.b.Receive(context.Background(), tb, "t", "", time.Hour); got <- err }()
	waitFor(t, func() bool { return e.b.Waiting() == 1 })
	e.clk.add(2 * DefaultTokenTTL)
	e.b.Expire()
	if err := <-got; !errors.Is(err, ErrRevoked) {
		t.Fatalf("waiting receive after expiry: %v", err)
	}
	down := false
	for _, r := range e.records(t) {
		down = down || r.Method == "edge-down" && strings.Contains(r.Reason, "expired")
	}
	if !down {
		t.Fatal("no edge-down receipt for the expiry")
	}
}
