package netpolicy

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Policy
		err  error
	}{
		{"", None, nil},
		{"none", None, nil},
		{"proxied", Proxied, nil},
		{"full", "", ErrUnknown},
		{"Proxied", "", ErrUnknown},
		{"proxied ", "", ErrUnknown},
	} {
		got, err := Parse(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Parse(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "none", "proxied", "full"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err == nil && p != None && p != Proxied {
			t.Fatalf("Parse(%q) = %q, accepted a third policy", s, p)
		}
		if err != nil && p != "" {
			t.Fatalf("Parse(%q) = %q with an error", s, p)
		}
	})
}
