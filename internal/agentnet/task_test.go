package agentnet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serveOn serves b on dir's socket until the returned stop is called.
func serveOn(t *testing.T, b *Broker, dir string) (stop func()) {
	t.Helper()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Server{Broker: b, UID: os.Getuid()}).Serve(ctx, l) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestTaskRefresh: a Task registers, keeps its registration through a
// lapse (registers again) and through a broker restart (a new instance:
// registers again with it), and a revoked task stays off, even after the
// next restart. Close unregisters.
func TestTaskRefresh(t *testing.T) {
	dir := brokerDir(t)
	e := newEnv(t, "a", "b")
	e.b.uid = os.Getuid()
	ps := []Policy{e.policy("a", true, Quota{}, "b"), e.policy("b", true, Quota{}, "a")}
	newBroker := func() *Broker {
		b, err := New(Options{StateDir: filepath.Join(e.dir, "state", "agentnet"), Receipts: e.log, UID: os.Getuid(), Now: e.clk.now})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.SetPolicies(ps); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b1 := newBroker()
	stop := serveOn(t, b1, dir)
	ctx := context.Background()
	ta := &Task{Client: NewClient(dir), Workspace: e.ws["a"]}
	tb := &Task{Client: NewClient(dir), Workspace: e.ws["b"]}
	defer ta.Client.Close()
	defer tb.Client.Close()
	for _, tk := range []*Task{ta, tb} {
		if _, err := tk.Register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	refresh := func(tk *Task, want bool) {
		t.Helper()
		if live, err := tk.Refresh(ctx); err != nil || live != want {
			t.Fatalf("Refresh = %v, %v; want %v", live, err, want)
		}
	}
	refresh(ta, true)
	tok := ta.tok()
	// Leaks finds the token and each of its parts, and nothing else.
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || !ta.Leaks([]byte("x"+tok+"y")) || !ta.Leaks([]byte("sig="+parts[2])) || !ta.Leaks([]byte(parts[1])) || ta.Leaks([]byte("vakan1 "+e.ws["a"])) || tb.Leaks([]byte(tok)) {
		t.Fatal("Leaks does not recognise the token, its parts, or only them")
	}

	// The registrations lapse (the processes were stopped past the
	// tokens' life): both register again.
	e.clk.add(2 * DefaultTokenTTL)
	refresh(ta, false) // b has not come back yet
	refresh(tb, true)
	refresh(ta, true)
	if ta.tok() == tok {
		t.Fatal("no new token after the registration lapsed")
	}

	// The broker restarts (a new instance, no registrations).
	stop()
	b2 := newBroker()
	stop = serveOn(t, b2, dir)
	if b2.Instance() == b1.Instance() {
		t.Fatal("two broker runs share an instance id")
	}
	refresh(ta, false)
	refresh(tb, true)
	refresh(ta, true)
	if _, err := ta.Send(ctx, e.ws["b"], "t", []byte("hi")); err != nil {
		t.Fatalf("send after the restart: %v", err)
	}

	// Revocation: A stays off, through a refresh and a restart.
	if n, err := b2.Revoke(e.ws["a"]); err != nil || n != 1 {
		t.Fatalf("revoke = %d, %v", n, err)
	}
	refresh(ta, false)
	if !ta.Revoked() {
		t.Fatal("the task does not know it was revoked")
	}
	stop()
	b3 := newBroker()
	serveOn(t, b3, dir)
	refresh(ta, false)
	refresh(tb, false)
	b3.mu.Lock()
	n := len(b3.tasks)
	b3.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d tasks registered with the new broker; want 1 (b only: a was revoked)", n)
	}
	// Close unregisters b.
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b3.mu.Lock()
	n = len(b3.tasks)
	b3.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d tasks after Close", n)
	}
}
