package agentnet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// serve runs a real Server for e on a socket and returns its client.
func serve(t *testing.T, e *env, uid int) *Client {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("peer credentials are implemented on Linux only")
	}
	dir, err := os.MkdirTemp("", "an") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := Listen(filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Server{Broker: e.b, UID: uid}).Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return NewClient(filepath.Join(dir, "s"))
}

func TestServerSocket(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.b.uid = os.Getuid()
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")})
	c := serve(t, e, os.Getuid())
	st, err := os.Stat(c.Socket)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Dir(c.Socket)); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir mode %v %v", st.Mode(), err)
	}
	ctx := context.Background()
	ta, _, err := c.Register(ctx, e.ws["a"])
	if err != nil {
		t.Fatal(err)
	}
	tb, idb, err := c.Register(ctx, e.ws["b"])
	if err != nil {
		t.Fatal(err)
	}
	if live, err := c.Live(ctx, ta); err != nil || !live {
		t.Fatalf("live = %v %v", live, err)
	}
	corr, err := c.Request(ctx, ta, idb.ID, "q", []byte("ping"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Receive(ctx, tb, "q", "", time.Second)
	if err != nil || string(m.Body) != "ping" {
		t.Fatalf("receive: %+v %v", m, err)
	}
	if err := c.Reply(ctx, tb, corr, []byte("pong")); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Receive(ctx, ta, "q", corr, time.Second); err != nil || string(m.Body) != "pong" {
		t.Fatalf("reply: %+v %v", m, err)
	}
	if _, err := c.Send(ctx, ta, e.ws["a"], "q", nil); !errors.Is(err, ErrDestination) {
		t.Fatalf("self-loop over the socket: %v", err)
	}
	es, err := c.Edges(ctx)
	if err != nil || len(es) != 1 || !es[0].Up {
		t.Fatalf("edges = %+v %v", es, err)
	}
	// Revocation over the socket ends a waiting receive.
	done := make(chan error, 1)
	go func() { _, err := c.Receive(ctx, ta, "q", "", time.Minute); done <- err }()
	waitFor(t, func() bool { e.b.mu.Lock(); defer e.b.mu.Unlock(); return len(e.b.waiters) == 1 })
	if n, err := c.Revoke(ctx, e.ws["b"]); err != nil || n != 1 {
		t.Fatalf("revoke = %d %v", n, err)
	}
	if err := <-done; !errors.Is(err, ErrRevoked) {
		t.Fatalf("receive after revoke: %v", err)
	}
	if _, err := c.Peers(ctx, tb); !errors.Is(err, ErrToken) || strings.Contains(err.Error(), tb) {
		t.Fatalf("revoked token: %v", err)
	}
}

// TestServerRefusesOtherUID: a connection whose peer uid is not the
// broker's is refused before any operation (the same call succeeds for the
// right uid in TestServerSocket).
func TestServerRefusesOtherUID(t *testing.T) {
	e := newEnv(t, "a")
	e.b.uid = os.Getuid()
	c := serve(t, e, os.Getuid()+1)
	_, _, err := c.Register(context.Background(), e.ws["a"])
	if err == nil || !strings.Contains(err.Error(), "peer uid") {
		t.Fatalf("register from another uid: %v", err)
	}
	if len(e.b.idents) != 0 {
		t.Fatal("an identity was created")
	}
}

// TestListenRefusesLiveSocket: a second broker for the same dir fails on
// the broker lock while the first listens.
func TestListenRefusesLiveSocket(t *testing.T) {
	e := newEnv(t)
	c := serve(t, e, os.Getuid())
	if _, err := Listen(filepath.Dir(c.Socket)); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second listen: %v", err)
	}
}

// TestCanceledReceiveTakesNothing: a client that gives up a waiting
// receive (its context ends: the connection closes) stops the broker's
// wait at once, so a message sent afterwards stays queued for the next
// receive instead of being taken for a reader that is gone.
func TestCanceledReceiveTakesNothing(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.b.uid = os.Getuid()
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")})
	c := serve(t, e, os.Getuid())
	ctx := context.Background()
	ta, _, err := c.Register(ctx, e.ws["a"])
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := c.Register(ctx, e.ws["b"])
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() { _, err := c.Receive(rctx, tb, "t", "", time.Minute); gave <- err }()
	waitFor(t, func() bool { return e.b.Waiting() == 1 })
	cancel()
	if err := <-gave; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled receive: %v", err)
	}
	waitFor(t, func() bool { return e.b.Waiting() == 0 })
	if _, err := c.Send(ctx, ta, e.ws["b"], "t", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	m, err := c.Receive(ctx, tb, "t", "", 0)
	if err != nil || string(m.Body) != "kept" {
		t.Fatalf("the message sent after the canceled receive: %+v, %v", m, err)
	}
}
