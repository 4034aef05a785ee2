package proxyproto

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ src, dst string }{
		{"10.0.0.2:40000", "93.184.216.34:443"},
		{"[fd00::2]:40000", "[2606:4700::1]:443"},
		{"[::ffff:10.0.0.2]:1", "10.0.0.1:80"},
	} {
		src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
		b, err := Append(nil, src, dst)
		if err != nil {
			t.Fatal(err)
		}
		payload := []byte("GET / HTTP/1.1\r\n")
		r := bytes.NewReader(append(b, payload...))
		h, err := Read(r)
		if err != nil {
			t.Fatalf("%v: %v", tc, err)
		}
		if h.Source.Addr() != src.Addr().Unmap() || h.Source.Port() != src.Port() || h.Destination.Addr() != dst.Addr().Unmap() || h.Destination.Port() != dst.Port() {
			t.Errorf("got %+v for %v", h, tc)
		}
		rest, _ := io.ReadAll(r)
		if !bytes.Equal(rest, payload) {
			t.Errorf("Read consumed stream bytes: rest %q", rest)
		}
	}
	if _, err := Append(nil, netip.AddrPort{}, netip.MustParseAddrPort("[::1]:2")); err == nil {
		t.Error("invalid source accepted")
	}
}

func TestRejects(t *testing.T) {
	t.Parallel()
	good, _ := Append(nil, netip.MustParseAddrPort("10.0.0.2:1"), netip.MustParseAddrPort("1.2.3.4:443"))
	mut := func(i int, v byte) []byte { b := bytes.Clone(good); b[i] = v; return b }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ErrNotProxy},
		{"v1 text", []byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"), ErrNotProxy},
		{"version 1 in v2 frame", mut(12, 0x11), ErrMalformed},
		{"LOCAL", mut(12, 0x20), ErrUnsupported},
		{"bad command", mut(12, 0x2f), ErrMalformed},
		{"UDP", mut(13, 0x12), ErrUnsupported},
		{"UNIX", mut(13, 0x31), ErrUnsupported},
		{"short v4 block", append(mut(15, 4)[:16], 1, 2, 3, 4), ErrMalformed},
		{"too long", mut(14, 0xff), ErrMalformed},
		{"dst port 0", append(bytes.Clone(good[:26]), 0, 0), ErrMalformed},
	}
	for _, tc := range tests {
		_, err := Read(bytes.NewReader(tc.b))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Read err = %v, want %v", tc.name, err, tc.want)
		}
	}
	// Truncated streams are errors, never a header.
	for i := range len(good) {
		if _, err := Read(bytes.NewReader(good[:i])); err == nil {
			t.Fatalf("truncated header of %d bytes accepted", i)
		}
		if _, _, err := Parse(good[:i]); err == nil {
			t.Fatalf("Parse accepted %d-byte prefix", i)
		}
	}
}

// FuzzParse checks that Parse never panics, never reports a length beyond
// its input or MaxHeaderLen, agrees with Read, and that every header it
// accepts re-encodes to an equivalent header.
func FuzzParse(f *testing.F) {
	g4, _ := Append(nil, netip.MustParseAddrPort("10.0.0.2:1"), netip.MustParseAddrPort("1.2.3.4:443"))
	g6, _ := Append(nil, netip.MustParseAddrPort("[fd00::1]:1"), netip.MustParseAddrPort("[2001:4860::1]:443"))
	f.Add(g4)
	f.Add(g6)
	f.Add(append(bytes.Clone(g4), 1, 0, 3, 'a', 'b', 'c'))
	f.Add([]byte(Signature))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		rh, rerr := Read(bytes.NewReader(b))
		if err != nil {
			if rerr == nil {
				t.Fatalf("Read accepted what Parse refused (%v): %x", err, b)
			}
			return
		}
		if rerr != nil || rh != h {
			t.Fatalf("Parse %+v and Read %+v (%v) disagree", h, rh, rerr)
		}
		if n > len(b) || n > fixedLen+MaxHeaderLen || n < fixedLen+inetLen {
			t.Fatalf("bad length %d for %d input bytes", n, len(b))
		}
		if h.Destination.Port() == 0 || !h.Destination.Addr().IsValid() {
			t.Fatalf("accepted header without a destination: %+v", h)
		}
		enc, err := Append(nil, h.Source, h.Destination)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", h, err)
		}
		h2, _, err := Parse(enc)
		if err != nil || h2.Destination.Addr().Unmap() != h.Destination.Addr().Unmap() || h2.Destination.Port() != h.Destination.Port() {
			t.Fatalf("re-encoded header %+v -> %+v (%v)", h, h2, err)
		}
	})
}
