package proxy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func identityScan(r io.Reader) (io.Reader, func()) { return r, func() {} }

// FuzzFrameRelay feeds arbitrary client bytes (the sandbox controls them)
// to the WebSocket frame relay with a pass-through scanner: it must never
// panic or hang, and what it yields is always a prefix of its input (all of
// it when the input is a sequence of complete, acceptable frames).
func FuzzFrameRelay(f *testing.F) {
	f.Add(wsFrame(true, 1, []byte("hello"), []byte{1, 2, 3, 4}, 0))
	f.Add(append(wsFrame(false, 1, []byte(strings.Repeat("a", 200)), []byte{9, 9, 9, 9}, 0), wsFrame(true, 0, []byte("b"), nil, 0)...))
	f.Add(wsFrame(true, 2, bytes.Repeat([]byte{0}, 70000), []byte{1, 1, 1, 1}, 0))
	f.Add([]byte{0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0xc1, 0x80, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := newFrameRelay(iotest.HalfReader(bytes.NewReader(in)), identityScan)
		defer fr.Close()
		out, err := io.ReadAll(fr)
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("output is not a prefix of the input:\nin  %x\nout %x", in, out)
		}
		if err == nil && !bytes.Equal(in, out) {
			t.Fatalf("complete frames not relayed whole:\nin  %x\nout %x", in, out)
		}
		if err != nil && !errors.Is(err, errBadFrame) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func TestParseFrameHeader(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     []byte
		ok     bool
		length uint64
		bad    bool
	}{
		{"short", []byte{0x81}, false, 0, false},
		{"7-bit", []byte{0x81, 0x05}, true, 5, false},
		{"16-bit masked", []byte{0x82, 0xfe, 0x01, 0x00, 1, 2, 3, 4}, true, 256, false},
		{"16-bit incomplete", []byte{0x82, 0xfe, 0x01}, false, 0, false},
		{"64-bit", []byte{0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0}, true, 65536, false},
		{"64-bit high bit", []byte{0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0}, false, 0, true},
		{"rsv1", []byte{0xc1, 0x00}, false, 0, true},
		{"rsv3", []byte{0x91, 0x00}, false, 0, true},
	} {
		h, ok, err := parseFrameHeader(tc.in)
		if (err != nil) != tc.bad || ok != tc.ok || (ok && h.length != tc.length) {
			t.Errorf("%s: ok=%v len=%d err=%v", tc.name, ok, h.length, err)
		}
	}
}
