package ui

import (
	"context"
	"os"
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

// A log verified while its last records were not signed yet (the gateway
// writes a checkpoint shortly after a record) is verified again once the
// signature file catches up, though the log itself did not change.
func TestReceiptsLogsReverifiedWhenSigned(t *testing.T) {
	dir, keyDir := t.TempDir(), t.TempDir()
	key, err := receipts.LoadOrCreateKey(keyDir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "s.jsonl")
	l, err := receipts.OpenSigned(path, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"one.test", "two.test"} {
		if err := l.Append(receipts.Record{Protocol: "https", Method: "GET", Host: host, Port: 443, Decision: "allow"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sig, err := os.ReadFile(path + receipts.SigSuffix)
	if err != nil || len(sig) == 0 {
		t.Fatalf("control: no signature file: %v", err)
	}
	h := newHub(Options{ReceiptsDirs: []string{dir}, ReceiptsKeyFile: filepath.Join(keyDir, receipts.PubKeyFile)})
	check := func(want bool) {
		t.Helper()
		logs, err := h.receiptsLogs()
		if err != nil || len(logs) != 1 || logs[0].Verified != want {
			t.Fatalf("receipts logs: %+v %v, want verified %v", logs, err, want)
		}
	}
	check(true)
	// The signature not written yet: the records are not covered.
	if err := os.WriteFile(path+receipts.SigSuffix, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	check(false)
	// It lands; the log is the same file as before.
	if err := os.WriteFile(path+receipts.SigSuffix, sig, 0o600); err != nil {
		t.Fatal(err)
	}
	check(true)
}
