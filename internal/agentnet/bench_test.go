package agentnet

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkSendReceive is one send and the matching receive across a live
// edge, in process (no socket, no MCP).
func BenchmarkSendReceive(b *testing.B) {
	e := newEnv(&testing.T{}, "a", "b")
	e.b.SetPolicies([]Policy{e.policy("a", true, Quota{PerMinute: 1 << 30}, "b"), e.policy("b", true, Quota{PerMinute: 1 << 30}, "a")})
	ta, _, _ := e.b.Register(e.ws["a"], 1000)
	tb, _, _ := e.b.Register(e.ws["b"], 1000)
	msg := []byte("hello")
	b.ResetTimer()
	for range b.N {
		if _, err := e.b.Send(ta, e.ws["b"], "t", msg); err != nil {
			b.Fatal(err)
		}
		if _, err := e.b.Receive(context.Background(), tb, "t", "", time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// TestQueuedMemoryBounded fills 50 edges with 1,000 queued messages each
// and then tries 1,000 more per edge: the queue-depth quota refuses them,
// so the heap does not grow with the extra sends; draining the queues gives
// the memory back. It logs the heap cost. It skips under -race (too slow);
// scripts/test runs it again without -race.
func TestQueuedMemoryBounded(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("fills 50,000 messages (too slow under -race; run without it)")
	}
	names := []string{"hub"}
	for i := range 50 {
		names = append(names, fmt.Sprintf("w%d", i))
	}
	e := newEnv(t, names...)
	q := Quota{PerMinute: 100000, MaxBytes: 256, QueueDepth: 1000}
	hub := e.policy("hub", true, q, names[1:]...)
	ps := []Policy{hub}
	for _, n := range names[1:] {
		ps = append(ps, e.policy(n, true, q, "hub"))
	}
	if err := e.b.SetPolicies(ps); err != nil {
		t.Fatal(err)
	}
	hubTok, _ := e.register(t, "hub")
	toks := map[string]string{}
	for _, n := range names[1:] {
		toks[n], _ = e.register(t, n)
	}
	body := make([]byte, 256)
	fill := func() (refused int) {
		for _, n := range names[1:] {
			for range 1000 {
				if _, err := e.b.Send(toks[n], e.ws["hub"], "t", body); err != nil {
					refused++
				}
			}
		}
		return refused
	}
	heap := func() uint64 {
		if err := e.log.Sync(); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	if r := fill(); r != 0 {
		t.Fatalf("%d sends refused while filling", r)
	}
	full := heap()
	if r := fill(); r != 50*1000 {
		t.Fatalf("%d of 50,000 over-depth sends refused", r)
	}
	after := heap()
	queued := 0
	e.b.mu.Lock()
	for _, q := range e.b.queues {
		queued += len(q.msgs)
	}
	e.b.mu.Unlock()
	if queued != 50*1000 {
		t.Fatalf("%d messages queued, want 50,000", queued)
	}
	// The refused sends leave nothing queued: allow slack for the
	// runtime, not for a second copy of the queues.
	if after > full+(full-base)/2 {
		t.Fatalf("heap grew from %d to %d KiB with refused sends", full>>10, after>>10)
	}
	// Draining the queues gives the memory back.
	got := 0
	for {
		if _, err := e.b.Receive(context.Background(), hubTok, "t", "", 0); err != nil {
			break
		}
		got++
	}
	drained := heap()
	t.Logf("heap: %d KiB before, %d KiB with 50 edges x 1,000 queued 256-byte messages, %d KiB after 50,000 more refused sends, %d KiB after draining %d", base>>10, full>>10, after>>10, drained>>10, got)
	if got != 50*1000 {
		t.Fatalf("drained %d messages, want 50,000", got)
	}
	if drained > base+(full-base)/4 {
		t.Fatalf("heap after draining the queues: %d KiB (empty: %d KiB, full: %d KiB)", drained>>10, base>>10, full>>10)
	}
}
