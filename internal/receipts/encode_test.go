package receipts

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// checkEncoding fails when marshalRecord's bytes differ from json.Marshal's
// (the chain hashes the bytes: both must agree exactly), and reports
// whether the fast path (no fallback) encoded r.
func checkEncoding(t *testing.T, r Record) bool {
	t.Helper()
	want, werr := json.Marshal(&r)
	_, fast := appendRecord(nil, &r)
	got, gerr := marshalRecord([]byte("prefix"), &r)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("record %+v: json.Marshal error %v, marshalRecord error %v", r, werr, gerr)
	}
	if werr != nil {
		if string(got) != "prefix" {
			t.Fatalf("marshalRecord left %q after an error", got)
		}
		return fast
	}
	if !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("record %+v:\nmarshalRecord %s\njson.Marshal  %s", r, got[len("prefix"):], want)
	}
	return fast
}

func TestAppendRecordMatchesJSON(t *testing.T) {
	base := Record{
		Seq: 41, Time: time.Date(2026, 12, 1, 5, 6, 7, 891000000, time.UTC),
		Session: "s1", Client: "127.0.0.1:4242", Protocol: "https", Method: "GET",
		Host: "api.example.test", Port: 443, Path: "/v1/x", Rule: 2, RuleName: "api",
		Decision: Allow, Reason: "rule 2 allows", Status: 200, BytesOut: 12, BytesIn: 345,
		Secrets: []string{"GH_TOKEN", "OTHER"}, Prev: ZeroHash,
	}
	zone := time.FixedZone("", -(7*3600 + 30*60))
	tests := []struct {
		name string
		edit func(*Record)
		fast bool
	}{
		{"full", func(*Record) {}, true},
		{"empty optional fields", func(r *Record) {
			*r = Record{Protocol: "http", Rule: -1, Decision: Deny, Prev: ZeroHash, Time: base.Time}
		}, true},
		{"zero time", func(r *Record) { r.Time = time.Time{} }, true},
		{"whole second", func(r *Record) { r.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }, true},
		{"zone offset", func(r *Record) { r.Time = time.Date(2026, 1, 2, 3, 4, 5, 6, zone) }, true},
		{"monotonic reading", func(r *Record) { r.Time = time.Now() }, true},
		{"negative rule and counts", func(r *Record) { r.Rule, r.BytesIn, r.BytesOut = -1, -3, math.MinInt64 }, true},
		{"max seq", func(r *Record) { r.Seq = math.MaxUint64 }, true},
		{"empty secret name", func(r *Record) { r.Secrets = []string{""} }, true},
		{"empty secrets slice", func(r *Record) { r.Secrets = []string{} }, true},
		{"quote in path", func(r *Record) { r.Path = `/a"b` }, false},
		{"html in reason", func(r *Record) { r.Reason = "<script>&</script>" }, false},
		{"control bytes", func(r *Record) { r.Reason = "a\nb\tc\x00\x7f" }, false},
		{"utf-8 and invalid utf-8", func(r *Record) { r.Host = "bücher\u2028\xff" }, false},
		{"backslash in secret name", func(r *Record) { r.Secrets = []string{`a\b`} }, false},
		{"year beyond 9999", func(r *Record) { r.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
		{"negative year", func(r *Record) { r.Time = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) }, false},
		{"zone of 24 hours", func(r *Record) { r.Time = time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)) }, false},
		{"zone with seconds", func(r *Record) { r.Time = time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 3600+30*60+7)) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			tt.edit(&r)
			if fast := checkEncoding(t, r); fast != tt.fast {
				t.Errorf("fast path %v, want %v", fast, tt.fast)
			}
		})
	}
}

// FuzzAppendRecord checks that the hand-written encoder and json.Marshal
// agree on every record (the fallback included).
func FuzzAppendRecord(f *testing.F) {
	f.Add(uint64(1), int64(1764565567891000000), 0, "s", "127.0.0.1:1", "https", "GET", "h.test", uint16(443), "/p", 3, "r", "allow", "ok", 200, int64(1), int64(2), "A,B")
	f.Add(uint64(0), int64(-62135596800000000000/1000), -5, "", "", "", "", "", uint16(0), "", -1, "", "deny", "<&>\"\\\n\u2028\xff", 0, int64(0), int64(0), "")
	f.Fuzz(func(t *testing.T, seq uint64, unixNano int64, zoneSec int, session, client, proto, method, host string, port uint16, path string, rule int, ruleName, decision, reason string, status int, out, in int64, secrets string) {
		r := Record{
			Seq: seq, Time: time.Unix(0, unixNano).In(time.FixedZone("", zoneSec%(48*3600))),
			Session: session, Client: client, Protocol: proto, Method: method, Host: host, Port: port,
			Path: path, Rule: rule, RuleName: ruleName, Decision: decision, Reason: reason,
			Status: status, BytesOut: out, BytesIn: in, Prev: ZeroHash,
		}
		if secrets != "" {
			r.Secrets = strings.Split(secrets, ",")
		}
		checkEncoding(t, r)
	})
}

// BenchmarkEncodeRecord compares the hand-written encoder with
// json.Marshal on a typical allowed request's record.
func BenchmarkEncodeRecord(b *testing.B) {
	r := Record{
		Seq: 123456, Time: time.Now(), Session: "bench", Client: "127.0.0.1:40522", Protocol: "https",
		Method: "GET", Host: "bench.test", Port: 443, Path: "/", Rule: 0, Decision: Allow,
		Reason: "rule 0 allows", Status: 200, BytesIn: 128, Secrets: []string{"BENCH_TOKEN"}, Prev: ZeroHash,
	}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(&r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendRecord", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for range b.N {
			if _, ok := appendRecord(buf[:0], &r); !ok {
				b.Fatal("fell back")
			}
		}
	})
}
