package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestLineReader reads lines below, at and above the limit: up to it a
// line comes back whole, above it the line is consumed (the next one
// follows in step), reported with its size and its id.
func TestLineReader(t *testing.T) {
	const max = 40
	pad := func(head string, n int, tail string) string {
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	tests := []struct {
		name    string
		line    string
		tooLong bool
		id      string
	}{
		{"empty", "", false, ""},
		{"limit-1", pad(`{"id":"a","v":"`, max-1, `"}`), false, ""},
		{"limit", pad(`{"id":"a","v":"`, max, `"}`), false, ""},
		{"limit+1", pad(`{"id":"a","v":"`, max+1, `"}`), true, `"a"`},
		{"far above", pad(`{"id":7,"v":"`, 100*max, `"}`), true, `7`},
		{"id last", pad(`{"v":"`, 3*max, `","id":"last"}`), true, `"last"`},
		{"nested id is not the id", pad(`{"p":{"id":"inner"},"v":"`, 3*max, `"}`), true, ""},
		{"id in a string is not the id", pad(`{"v":"\"id\":\"no\"`, 3*max, `"}`), true, ""},
		{"escaped key", pad(`{"\u0069d":"esc","v":"`, 3*max, `"}`), true, `"esc"`},
		{"escaped id value", pad(`{"id":"a\"b","v":"`, 3*max, `"}`), true, `"a\"b"`},
		{"null id", pad(`{"id":null,"v":"`, 3*max, `"}`), true, ""},
		{"object id", pad(`{"id":{"a":1},"v":"`, 3*max, `"}`), true, ""},
		{"not JSON", strings.Repeat("x", 2*max), true, ""},
		{"array", pad(`[{"id":"a"},"`, 3*max, `"]`), true, ""},
	}
	var stream strings.Builder
	for _, tc := range tests {
		stream.WriteString(tc.line + "\n")
	}
	stream.WriteString("tail")
	// One byte per read: lines arrive in many pieces.
	lr := NewLineReader(iotest.OneByteReader(strings.NewReader(stream.String())), max)
	for _, tc := range tests {
		l, err := lr.Next()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if l.TooLong != tc.tooLong || l.Size != int64(len(tc.line)) || string(l.ID) != tc.id {
			t.Errorf("%s: too long %v, size %d, id %s; want %v, %d, %s", tc.name, l.TooLong, l.Size, l.ID, tc.tooLong, len(tc.line), tc.id)
		}
		if !tc.tooLong && string(l.Data) != tc.line {
			t.Errorf("%s: data %q", tc.name, l.Data)
		}
	}
	if l, err := lr.Next(); err != io.EOF || string(l.Data) != "tail" {
		t.Fatalf("the unterminated rest: %q %v", l.Data, err)
	}
}

// FuzzIDScanner compares the streaming id scanner with encoding/json on
// any input, fed whole and in pieces: on a JSON object it finds the value
// of the first top-level member named "id" when that is a string or a
// number of at most MaxIDBytes bytes, and otherwise nothing; on anything
// else it finds nothing or a valid JSON scalar.
func FuzzIDScanner(f *testing.F) {
	for _, s := range []string{`{"id":"1","op":"ping"}`, `{"jsonrpc":"2.0","method":"x","params":{"id":3},"id":42}`, `{"id":-1.5e3}`, `{"\u0069d":"x"}`,
		`{"a":[{"id":1}],"id":"b\\"}`, `[1]`, `"id"`, `{"id":true,"id":"2"}`, `{"id" : "sp" }`, `{"id":"` + strings.Repeat("z", MaxIDBytes) + `"}`} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		whole := &idScanner{}
		whole.feed(in)
		got := whole.result()
		pieces := &idScanner{}
		n := int(step) + 1
		for i := 0; i < len(in); i += n {
			pieces.feed(in[i:min(i+n, len(in))])
		}
		if !bytes.Equal(pieces.result(), got) {
			t.Fatalf("fed in pieces of %d: %s, whole: %s", n, pieces.result(), got)
		}
		if got != nil && (!json.Valid(got) || len(got) > MaxIDBytes || (got[0] != '"' && got[0] != '-' && (got[0] < '0' || got[0] > '9'))) {
			t.Fatalf("id %s is not a JSON string or number", got)
		}
		want, ok := firstID(in)
		if ok && !bytes.Equal(got, want) {
			t.Fatalf("%q: id %s, want %s", in, got, want)
		}
	})
}

// firstID is the raw value of in's first top-level "id" member when it is
// a string or number of at most MaxIDBytes bytes (nil otherwise); ok is
// false when in is not one valid JSON object.
func firstID(in []byte) (id json.RawMessage, ok bool) {
	if !json.Valid(in) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		if key != "id" {
			continue
		}
		if len(v) > MaxIDBytes || (v[0] != '"' && v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
			return nil, true
		}
		return v, true
	}
	return nil, true
}
