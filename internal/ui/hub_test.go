package ui

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"vak/internal/receipts"
)

// A page that subscribes before the hub's first pass over the receipts
// logs (a page opened as vak ui starts) still gets the records already in
// them, as events; one that subscribes after gets them in its backlog.
// Each gets every record once.
func TestHubFirstPass(t *testing.T) {
	dir := t.TempDir()
	l, err := receipts.Open(filepath.Join(dir, "s.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, host := range []string{"one.test", "two.test"} {
		if err := l.Append(receipts.Record{Protocol: "https", Method: "GET", Host: host, Port: 443, Decision: "allow"}); err != nil {
			t.Fatal(err)
		}
	}
	h := newHub(Options{ReceiptsDirs: []string{dir}, Poll: 20 * time.Millisecond})
	early, ch, unsubscribe := h.subscribe()
	defer unsubscribe()
	if len(early) != 0 {
		t.Fatalf("backlog before the first pass: %+v", early)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.tail(ctx)
	var hosts []string
	for len(hosts) < 2 {
		select {
		case e := <-ch:
			if d, ok := e.Data.(decisionView); ok {
				hosts = append(hosts, d.Host)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the early page got %v, want one.test and two.test", hosts)
		}
	}
	if hosts[0] != "one.test" || hosts[1] != "two.test" {
		t.Errorf("the early page got %v", hosts)
	}
	late, _, unsubscribeLate := h.subscribe()
	defer unsubscribeLate()
	var backlog []string
	for _, e := range late {
		if d, ok := e.Data.(decisionView); ok {
			backlog = append(backlog, d.Host)
		}
	}
	if len(backlog) != 2 || backlog[0] != "one.test" || backlog[1] != "two.test" {
		t.Errorf("the late page's backlog: %v", backlog)
	}
}
