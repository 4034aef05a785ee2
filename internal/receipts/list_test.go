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
	list, err := List(dir, nil)
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
	if l, err := List(filepath.Join(dir, "missing"), nil); err != nil || len(l) != 0 {
		t.Errorf("missing dir: %v %v", l, err)
	}
}

// With a public key, List checks signatures: a signed log verifies and says
// so; an unsigned one does not.
func TestListSigned(t *testing.T) {
	dir := t.TempDir()
	key, err := LoadOrCreateKey(filepath.Join(dir, "key"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := LoadPublicKey(filepath.Join(dir, "key", PubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(dir, "logs")
	for name, k := range map[string]any{"signed.jsonl": key, "unsigned.jsonl": nil} {
		var l *Log
		if k != nil {
			l, err = OpenSigned(filepath.Join(logs, name), key)
		} else {
			l, err = Open(filepath.Join(logs, name))
		}
		if err != nil {
			t.Fatal(err)
		}
		l.Append(Record{Protocol: "dns", Decision: Deny})
		l.Close()
	}
	list, err := List(logs, pub)
	if err != nil || len(list) != 2 {
		t.Fatalf("%+v %v", list, err)
	}
	if s := list[0]; !s.Signed || s.Problem != "" || s.Records != 1 {
		t.Errorf("signed log: %+v", s)
	}
	if s := list[1]; s.Signed || s.Problem == "" {
		t.Errorf("unsigned log verified with a key: %+v", s)
	}
}
