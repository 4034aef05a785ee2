package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// errBadFrame is wrapped by errors about client WebSocket frames the relay
// refuses (extension bits set, impossible lengths).
var errBadFrame = errors.New("bad WebSocket frame")

// frameHeader is one parsed WebSocket frame header (RFC 6455 5.2).
type frameHeader struct {
	raw    []byte // the header bytes as received
	length uint64
	masked bool
	key    [4]byte
	err    error
}

// parseFrameHeader parses a frame header at the start of b. It returns the
// header and true, or false when b is too short (need more bytes), or an
// error for a header the relay refuses.
func parseFrameHeader(b []byte) (frameHeader, bool, error) {
	if len(b) < 2 {
		return frameHeader{}, false, nil
	}
	var h frameHeader
	if b[0]&0x70 != 0 {
		return h, false, fmt.Errorf("%w: reserved bits set (compression or an extension the gateway did not negotiate)", errBadFrame)
	}
	h.masked = b[1]&0x80 != 0
	n := 2
	switch l := b[1] & 0x7f; l {
	case 126:
		n += 2
	case 127:
		n += 8
	default:
		h.length = uint64(l)
	}
	if h.masked {
		n += 4
	}
	if len(b) < n {
		return frameHeader{}, false, nil
	}
	switch b[1] & 0x7f {
	case 126:
		h.length = uint64(binary.BigEndian.Uint16(b[2:4]))
	case 127:
		h.length = binary.BigEndian.Uint64(b[2:10])
		if h.length>>63 != 0 {
			return h, false, fmt.Errorf("%w: 64-bit length with the high bit set", errBadFrame)
		}
	}
	if h.masked {
		copy(h.key[:], b[n-4:n])
	}
	h.raw = append([]byte(nil), b[:n]...)
	return h, true, nil
}

// frameRelay reads client-to-server WebSocket frames and yields them
// unchanged, except that every payload byte passes, unmasked, through a
// scanner (a length-preserving check that fails on a secret) before it is
// masked again and released. Payloads are scanned as one stream across
// frames, so a value split over frames is still seen.
type frameRelay struct {
	src     io.Reader
	pr      *io.PipeReader
	pw      *io.PipeWriter
	scanned io.Reader
	stop    func()
	hdrs    chan frameHeader
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	cur       frameHeader
	remaining uint64
	pos       uint64
	out       []byte
	buf       []byte
	err       error
}

// newFrameRelay starts relaying src; scan wraps the unmasked payload
// stream. Close must be called.
func newFrameRelay(src io.Reader, scan func(io.Reader) (io.Reader, func())) *frameRelay {
	f := &frameRelay{src: src, hdrs: make(chan frameHeader, 1), done: make(chan struct{}), buf: make([]byte, 32<<10)}
	f.pr, f.pw = io.Pipe()
	f.scanned, f.stop = scan(f.pr)
	f.wg.Add(1)
	go f.parse()
	return f
}

func (f *frameRelay) send(h frameHeader) bool {
	select {
	case f.hdrs <- h:
		return true
	case <-f.done:
		return false
	}
}

// parse splits src into headers (sent on hdrs) and unmasked payload bytes
// (written to pw).
func (f *frameRelay) parse() {
	defer f.wg.Done()
	defer close(f.hdrs)
	buf := make([]byte, 32<<10)
	var pending []byte // bytes read but not yet consumed
	for {
		// Header.
		var h frameHeader
		for {
			var ok bool
			var err error
			h, ok, err = parseFrameHeader(pending)
			if err != nil {
				f.pw.CloseWithError(err)
				f.send(frameHeader{err: err})
				return
			}
			if ok {
				pending = pending[len(h.raw):]
				break
			}
			n, rerr := f.src.Read(buf)
			pending = append(pending, buf[:n]...)
			if rerr != nil && n == 0 {
				if rerr == io.EOF && len(pending) == 0 {
					f.pw.Close()
					return
				}
				if rerr == io.EOF {
					rerr = io.ErrUnexpectedEOF
				}
				f.pw.CloseWithError(rerr)
				f.send(frameHeader{err: rerr})
				return
			}
		}
		if !f.send(h) {
			return
		}
		// Payload.
		left := h.length
		var pos uint64
		for left > 0 {
			if len(pending) == 0 {
				n, rerr := f.src.Read(buf)
				pending = append(pending[:0], buf[:n]...)
				if n == 0 && rerr != nil {
					if rerr == io.EOF {
						rerr = io.ErrUnexpectedEOF
					}
					f.pw.CloseWithError(rerr)
					return
				}
			}
			n := uint64(len(pending))
			if n > left {
				n = left
			}
			chunk := append([]byte(nil), pending[:n]...)
			pending = pending[n:]
			if h.masked {
				for i := range chunk {
					chunk[i] ^= h.key[(pos+uint64(i))%4]
				}
			}
			if _, err := f.pw.Write(chunk); err != nil {
				return
			}
			pos += n
			left -= n
		}
	}
}

// Read returns the next relayed bytes.
func (f *frameRelay) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		if f.remaining == 0 {
			h, ok := <-f.hdrs
			switch {
			case !ok:
				f.err = io.EOF
			case h.err != nil:
				f.err = h.err
			default:
				f.cur, f.remaining, f.pos = h, h.length, 0
				f.out = h.raw
			}
			continue
		}
		want := uint64(len(f.buf))
		if want > f.remaining {
			want = f.remaining
		}
		n, err := f.scanned.Read(f.buf[:want])
		chunk := f.buf[:n]
		if f.cur.masked {
			for i := range chunk {
				chunk[i] ^= f.cur.key[(f.pos+uint64(i))%4]
			}
		}
		f.pos += uint64(n)
		f.remaining -= uint64(n)
		f.out = chunk
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			f.err = err
		}
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	return n, nil
}

// Close stops the parser (once its source read returns) and the scanner.
func (f *frameRelay) Close() error {
	f.once.Do(func() {
		close(f.done)
		f.pr.CloseWithError(io.ErrClosedPipe)
		f.stop()
	})
	return nil
}
