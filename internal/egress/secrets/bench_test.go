package secrets

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// BenchmarkRedact measures the response redactor on text without secrets
// (the common case), with the two secrets of session().
func BenchmarkRedact(b *testing.B) {
	s := session(&testing.T{})
	rng := rand.New(rand.NewPCG(1, 2))
	const alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n{}\":,"
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = alpha[rng.IntN(len(alpha))]
	}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if _, err := io.Copy(io.Discard, s.RedactReader(bytes.NewReader(data))); err != nil {
			b.Fatal(err)
		}
	}
}

// naiveFind is the reference for matcher.find: the earliest start, then
// the longest literal there.
func naiveFind(lits []literal, b []byte) (int, []byte) {
	for p := range b {
		var best []byte
		for _, l := range lits {
			if bytes.HasPrefix(b[p:], l.from) && len(l.from) > len(best) {
				best = l.from
			}
		}
		if best != nil {
			return p, best
		}
	}
	return -1, nil
}

// FuzzMatcherFind checks the window-filter search (literals without a
// common prefix) against the naive reference, so the probe step can never
// skip an occurrence.
func FuzzMatcherFind(f *testing.F) {
	f.Add([]byte("xxabcdefgh--ZZZZyyyyabcdefghij"), "abcdefgh", "ZZZZyyyy", "abcdefghij")
	f.Add([]byte("aaaaaaaaaaaaaaaab"), "aaaab", "baaaa", "aaaaaaaab")
	f.Fuzz(func(t *testing.T, data []byte, a, b, c string) {
		var lits []literal
		for i, s := range []string{a, b, c} {
			if len(s) < 4 || len(s) > 80 {
				return
			}
			lits = append(lits, literal{from: []byte(s), secret: i})
		}
		m := newMatcher(lits)
		for off := range min(len(data), 8) {
			hay := data[off:]
			gi, gl := m.find(hay)
			wi, wl := naiveFind(lits, hay)
			if gi != wi || (gl != nil) != (wl != nil) || (gl != nil && !bytes.Equal(gl.from, wl)) {
				t.Fatalf("find(%q) = %d %v, want %d %q (bloom %v)", hay, gi, gl, wi, wl, m.bloom != nil)
			}
		}
	})
}

// TestReplaceAllString checks the string form against replaceAll, around
// the size of its on-stack copy, with and without matches and blocks.
func TestReplaceAllString(t *testing.T) {
	blocked := &BlockedError{Secret: "B"}
	m := newMatcher([]literal{{from: []byte("PLACEHOLDER-A"), to: []byte("value-a"), secret: 0}, {from: []byte("REAL-B-VALUE"), block: blocked, secret: 1}})
	pad := func(n int) string { return strings.Repeat("x", n) }
	tests := []string{
		"", "Bearer nothing", "Bearer PLACEHOLDER-A", "PLACEHOLDER-A and PLACEHOLDER-A",
		"has REAL-B-VALUE", pad(243) + "PLACEHOLDER-A", pad(244) + "PLACEHOLDER-A", pad(300) + "PLACEHOLDER-A",
		pad(256), pad(257), pad(250) + "REAL-B-VALUE",
	}
	for _, v := range tests {
		want, wantUsed, wantErr := m.replaceAll([]byte(v))
		got, gotUsed, gotErr := m.replaceAllString(v)
		if wantErr != nil || gotErr != nil {
			if !errors.Is(gotErr, wantErr) {
				t.Errorf("replaceAllString(%.20q…) error %v, want %v", v, gotErr, wantErr)
			}
			continue
		}
		if got != string(want) || !slices.Equal(gotUsed, wantUsed) {
			t.Errorf("replaceAllString(%.20q…) = %.40q %v, want %.40q %v", v, got, gotUsed, want, wantUsed)
		}
	}
}
