package receipts

import (
	"os"
	"path/filepath"
	"testing"
)

// List finds every log under a directory, counts its records and reports
// the ones that do not verify.
func TestList(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, n int) string {
		p := filepath.Join(dir, rel)
		l, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if err := l.Append(Record{Protocol: "dns", Decision: Deny, Host: "x.test"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("proxynet-a/1.jsonl", 2)
	write("proxynet-a/2.jsonl", 3)
	bad := write("main.jsonl", 2)
	data, _ := os.ReadFile(bad)
	os.WriteFile(bad, data[:len(data)/2], 0o600) // truncated mid-record
	list, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("List = %+v, want 3 logs", list)
	}
	got := map[string]Summary{}
	for _, s := range list {
		rel, _ := filepath.Rel(dir, s.Path)
		got[rel] = s
	}
	for rel, n := range map[string]uint64{"proxynet-a/1.jsonl": 2, "proxynet-a/2.jsonl": 3} {
		if s := got[rel]; s.Records != n || s.Problem != "" || s.First.IsZero() || s.Last.Before(s.First) {
			t.Errorf("%s: %+v", rel, s)
		}
	}
	if got["main.jsonl"].Problem == "" {
		t.Errorf("a truncated log verifies: %+v", got["main.jsonl"])
	}
	if l, err := List(filepath.Join(dir, "missing")); err != nil || len(l) != 0 {
		t.Errorf("missing dir: %v %v", l, err)
	}
}
