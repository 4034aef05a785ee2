package receipts

import (
	"path/filepath"
	"testing"
)

// BenchmarkAppendSigned appends records one at a time to a signed log, as
// a gateway at concurrency 1 does: the cost on the appending goroutine.
func BenchmarkAppendSigned(b *testing.B) {
	key, err := LoadOrCreateKey(filepath.Join(b.TempDir(), "key"))
	if err != nil {
		b.Fatal(err)
	}
	l, err := OpenSigned(filepath.Join(b.TempDir(), "r.jsonl"), key)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rec := Record{Session: "gw-bench", Client: "10.99.0.3:51234", Protocol: "https", Method: "GET", Host: "api.example.com", Port: 443, Path: "/repos/x/y", Rule: 2, RuleName: "api", Decision: Allow, Reason: "rule 2 (api) allows", Status: 200, BytesIn: 5120}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := l.Append(rec); err != nil {
			b.Fatal(err)
		}
	}
}
