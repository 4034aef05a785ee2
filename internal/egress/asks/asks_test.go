package asks

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/egress/policy"
)

func req(host string, port uint16, path string) policy.Request {
	return policy.Request{Proto: policy.ProtoHTTP, Host: policy.Host{Name: host}, Port: port, Method: "GET", Path: path}
}

type result struct {
	allow  bool
	reason string
}

// start runs Ask in the background.
func start(r *Registry, ctx context.Context, q policy.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		a, why := r.Ask(ctx, q)
		ch <- result{a, why}
	}()
	return ch
}

// waitPending waits until the registry holds an ask with count waiters.
func waitPending(t *testing.T, r *Registry, count int) Ask {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if p := r.Pending(); len(p) == 1 && p[0].Count == count {
			return p[0]
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no ask with %d waiting requests: %+v", count, r.Pending())
	return Ask{}
}

func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answer     Answer
		wantAllow  bool
		wantReason string
		// laterAsks: a later identical request asks again (not granted).
		laterAsks bool
	}{
		{"allow once", Answer{Allow: true, Scope: Once, By: "test"}, true, "allowed once by ask", true},
		{"allow for the run", Answer{Allow: true, Scope: Run, By: "test"}, true, "allowed for this run by ask", false},
		{"deny", Answer{Allow: false, By: "test"}, false, "was denied (test)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{Timeout: time.Minute})
			ctx := context.Background()
			q := req("unlisted.test", 443, "/x")
			// Two identical requests share one ask.
			a, b := start(r, ctx, q), start(r, ctx, q)
			ask := waitPending(t, r, 2)
			if ask.Host != "unlisted.test" || ask.Port != 443 || ask.Method != "GET" || ask.Path != "/x" {
				t.Fatalf("ask = %+v", ask)
			}
			if err := r.Answer(ask.ID, tc.answer); err != nil {
				t.Fatal(err)
			}
			for _, ch := range []<-chan result{a, b} {
				res := <-ch
				if res.allow != tc.wantAllow || !strings.Contains(res.reason, tc.wantReason) || !strings.Contains(res.reason, ask.ID) {
					t.Errorf("Ask = %v %q, want %v and %q naming %s", res.allow, res.reason, tc.wantAllow, tc.wantReason, ask.ID)
				}
			}
			if len(r.Pending()) != 0 {
				t.Fatalf("an answered ask is still pending: %+v", r.Pending())
			}
			// Another path on the same host and port.
			c := start(r, ctx, req("unlisted.test", 443, "/other"))
			if tc.laterAsks {
				next := waitPending(t, r, 1)
				if next.ID == ask.ID {
					t.Fatal("a new ask reused the answered ask's ID")
				}
				r.Answer(next.ID, Answer{By: "test"})
				<-c
			} else if res := <-c; !res.allow || !strings.Contains(res.reason, ask.ID) {
				t.Fatalf("a run grant did not cover a later request: %+v", res)
			}
			// A run grant covers its host and port only.
			d := start(r, ctx, req("unlisted.test", 8443, "/x"))
			other := waitPending(t, r, 1)
			r.Answer(other.ID, Answer{By: "test"})
			if res := <-d; res.allow {
				t.Fatal("a grant for port 443 allowed port 8443")
			}
		})
	}
}

func TestTimeoutAndCancel(t *testing.T) {
	r := New(Options{Timeout: 50 * time.Millisecond})
	allow, why := r.Ask(context.Background(), req("slow.test", 443, "/"))
	if allow || !strings.Contains(why, "not answered within 50ms") {
		t.Fatalf("timeout: %v %q", allow, why)
	}
	if len(r.Pending()) != 0 {
		t.Fatal("a timed-out ask is still pending")
	}
	r = New(Options{Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	ch := start(r, ctx, req("gone.test", 443, "/"))
	ask := waitPending(t, r, 1)
	cancel()
	if res := <-ch; res.allow || !strings.Contains(res.reason, "gave up") {
		t.Fatalf("cancelled: %+v", res)
	}
	if err := r.Answer(ask.ID, Answer{Allow: true, Scope: Once}); !errors.Is(err, ErrNoSuchAsk) {
		t.Fatalf("answering an abandoned ask: %v", err)
	}
	if err := r.Answer("nope", Answer{Allow: true, Scope: "forever"}); !errors.Is(err, ErrBadAnswer) {
		t.Fatalf("bad scope: %v", err)
	}
}

// An agent cannot flood the person who answers: asks pending at once and
// asks per minute are bounded; what is over the bound is refused at once.
func TestFloodBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := New(Options{Timeout: time.Minute, MaxPending: 2, PerMinute: 3, Now: clock})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := start(r, ctx, req("a.test", 443, "/"))
	b := start(r, ctx, req("b.test", 443, "/"))
	for deadline := time.Now().Add(5 * time.Second); len(r.Pending()) < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if allow, why := r.Ask(ctx, req("c.test", 443, "/")); allow || !strings.Contains(why, "2 asks are already pending") {
		t.Fatalf("third pending ask: %v %q", allow, why)
	}
	for _, p := range r.Pending() {
		r.Answer(p.ID, Answer{By: "test"})
	}
	<-a
	<-b
	d := start(r, ctx, req("d.test", 443, "/"))
	waitPending(t, r, 1)
	if allow, why := r.Ask(ctx, req("e.test", 443, "/")); allow || !strings.Contains(why, "asking is paused") {
		t.Fatalf("fourth ask in a minute: %v %q", allow, why)
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	e := start(r, ctx, req("e.test", 443, "/"))
	for deadline := time.Now().Add(5 * time.Second); len(r.Pending()) < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if len(r.Pending()) != 2 {
		t.Fatalf("a minute later asking did not resume: %+v", r.Pending())
	}
	cancel()
	<-d
	<-e
}

func TestSubscribe(t *testing.T) {
	r := New(Options{Timeout: time.Minute})
	now, events, cancel := r.Subscribe()
	defer cancel()
	if len(now) != 0 {
		t.Fatal(now)
	}
	ch := start(r, context.Background(), req("s.test", 443, "/"))
	ev := <-events
	if ev.Kind != "ask" || ev.Ask.Host != "s.test" {
		t.Fatalf("event %+v", ev)
	}
	r.Answer(ev.Ask.ID, Answer{Allow: true, Scope: Once, By: "test"})
	if ev := <-events; ev.Kind != "answered" || ev.Answer == nil || !ev.Answer.Allow {
		t.Fatalf("event %+v", ev)
	}
	<-ch
}
