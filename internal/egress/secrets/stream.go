package secrets

import (
	"bytes"
	"encoding/binary"
	"io"
	"slices"
	"sync"
	"time"
)

// literal is one pattern of a matcher: occurrences of from are replaced by
// to, or, when block is non-nil, stop the stream with that error.
type literal struct {
	from  []byte
	to    []byte
	block error
	// secret is the index of the secret the literal belongs to.
	secret int
}

// matcher finds the earliest (then longest) occurrence of any literal.
type matcher struct {
	lits   []literal // sorted longest first
	maxLen int
	// prefix is a common prefix of all literals (at least 4 bytes), searched
	// with one bytes.Index instead of one per literal.
	prefix []byte
	// Without a common prefix, a filter over 4-byte windows finds
	// candidates in one pass whatever the number of literals: every
	// window at offsets 0..minLen-4 of every literal is in bloom, and the
	// input is probed every step = minLen-3 bytes, since each occurrence
	// has exactly one of those windows at a probed position.
	minLen int
	step   int
	bloom  []uint64
	first  [256]bool // first bytes of the literals
}

// bloomBits is the size of the window filter (8 KiB).
const bloomBits = 1 << 16

func windowHash(x uint32) uint32 { return (x * 0x9E3779B1) >> (32 - 16) }

func newMatcher(lits []literal) *matcher {
	m := &matcher{lits: slices.Clone(lits)}
	slices.SortStableFunc(m.lits, func(a, b literal) int { return len(b.from) - len(a.from) })
	for _, l := range m.lits {
		m.maxLen = max(m.maxLen, len(l.from))
	}
	if len(m.lits) > 0 {
		p := m.lits[0].from
		for _, l := range m.lits[1:] {
			n := 0
			for n < len(p) && n < len(l.from) && p[n] == l.from[n] {
				n++
			}
			p = p[:n]
		}
		if len(p) >= 4 {
			m.prefix = p
		}
	}
	if len(m.lits) > 0 && m.prefix == nil {
		m.minLen = len(m.lits[len(m.lits)-1].from)
		if m.minLen >= 4 {
			m.step = m.minLen - 3
			m.bloom = make([]uint64, bloomBits/64)
			for _, l := range m.lits {
				m.first[l.from[0]] = true
				for off := 0; off <= m.minLen-4; off++ {
					h := windowHash(binary.LittleEndian.Uint32(l.from[off:]))
					m.bloom[h>>6] |= 1 << (h & 63)
				}
			}
		}
	}
	return m
}

// find returns the start of the earliest complete match in b and its
// literal, or -1.
func (m *matcher) find(b []byte) (int, *literal) {
	if m.prefix != nil {
		off := 0
		for {
			i := bytes.Index(b[off:], m.prefix)
			if i < 0 {
				return -1, nil
			}
			at := off + i
			for k := range m.lits {
				if bytes.HasPrefix(b[at:], m.lits[k].from) {
					return at, &m.lits[k]
				}
			}
			off = at + 1
		}
	}
	if m.bloom != nil {
		for i := 0; i+4 <= len(b); i += m.step {
			h := windowHash(binary.LittleEndian.Uint32(b[i:]))
			if m.bloom[h>>6]&(1<<(h&63)) == 0 {
				continue
			}
			// Candidate starts in order; literals are longest first.
			for p := max(0, i-(m.minLen-4)); p <= i; p++ {
				if !m.first[b[p]] {
					continue
				}
				for k := range m.lits {
					if bytes.HasPrefix(b[p:], m.lits[k].from) {
						return p, &m.lits[k]
					}
				}
			}
		}
		return -1, nil
	}
	best, bestLit := -1, (*literal)(nil)
	for k := range m.lits {
		hay := b
		if best >= 0 {
			// Only an earlier start (or the same start, already longer-first)
			// can win.
			hay = b[:min(len(b), best+len(m.lits[k].from)-1)]
		}
		if i := bytes.Index(hay, m.lits[k].from); i >= 0 && (best < 0 || i < best) {
			best, bestLit = i, &m.lits[k]
		}
	}
	return best, bestLit
}

// pendingFrom returns the smallest j such that b[j:] is a proper prefix of
// some literal (a match that more input could complete), or len(b). Only the
// last maxLen-1 bytes can qualify.
func (m *matcher) pendingFrom(b []byte) int {
	for j := max(0, len(b)-(m.maxLen-1)); j < len(b); j++ {
		rest := b[j:]
		for k := range m.lits {
			from := m.lits[k].from
			if len(from) > len(rest) && from[0] == rest[0] && bytes.HasPrefix(from, rest) {
				return j
			}
		}
	}
	return len(b)
}

// replaceAll rewrites s in one pass; it stops at the first blocking literal.
// replaceAllString is replaceAll for a string: one that holds no literal
// (nearly every header value) comes back as it is, without allocating.
func (m *matcher) replaceAllString(v string) (string, []int, error) {
	var buf [256]byte
	var b []byte
	if len(v) <= len(buf) {
		b = append(buf[:0], v...)
	} else {
		b = []byte(v)
	}
	if i, _ := m.find(b); i < 0 {
		return v, nil, nil
	}
	out, used, err := m.replaceAll([]byte(v))
	if err != nil {
		return "", used, err
	}
	return string(out), used, nil
}

func (m *matcher) replaceAll(s []byte) ([]byte, []int, error) {
	var out []byte
	var used []int
	for {
		i, lit := m.find(s)
		if i < 0 {
			if out == nil {
				return s, used, nil
			}
			return append(out, s...), used, nil
		}
		if lit.block != nil {
			return nil, used, lit.block
		}
		if out == nil {
			// Room for this replacement and the rest: usually the only
			// allocation.
			out = make([]byte, 0, len(s)-len(lit.from)+len(lit.to))
		}
		out = append(out, s[:i]...)
		out = append(out, lit.to...)
		used = append(used, lit.secret)
		s = s[i+len(lit.from):]
	}
}

// Stream is an io.Reader that rewrites another reader's bytes on the fly:
// every occurrence of a literal is replaced (or stops the stream with the
// literal's error), including occurrences split across reads. It holds back
// at most the longest literal's length minus one byte between reads, so
// memory stays bounded however long the stream is.
type Stream struct {
	src    io.Reader
	m      *matcher
	in     []byte // unprocessed input: the carry-over window plus new data
	out    []byte // processed output not yet returned
	outBuf []byte
	// inP and outP are the pooled buffers in and outBuf started with,
	// returned to the pool (the same pointers: no allocation) by release.
	inP, outP *[]byte
	srcErr    error
	err       error
	// Used is called with the secret index of each replacement.
	used func(int)

	// Interactive mode (see Interactive): a reader goroutine feeds chunks,
	// and a held-back tail is released after maxHold without more input.
	maxHold time.Duration
	ch      chan chunk
	done    chan struct{}
	once    sync.Once
}

type chunk struct {
	b   *[]byte
	n   int
	err error
}

var chunkPool = sync.Pool{New: func() any { b := make([]byte, streamChunk); return &b }}

// streamChunk is the read size from the source.
const streamChunk = 32 << 10

func newStream(src io.Reader, m *matcher, used func(int)) *Stream {
	return &Stream{src: src, m: m, used: used}
}

// Interactive switches s to interactive mode for request/response
// protocols (raw TCP, WebSocket): bytes held back because they could be the
// start of a secret are released after maxHold if no more input comes, so a
// protocol never stalls on them. A value split by a pause longer than
// maxHold is then not recognised; HTTP bodies, which always end, do not use
// this mode. Close must be called to stop the reader goroutine.
func (s *Stream) Interactive(maxHold time.Duration) *Stream {
	s.maxHold = maxHold
	s.ch = make(chan chunk, 1)
	s.done = make(chan struct{})
	go func() {
		for {
			bp := chunkPool.Get().(*[]byte)
			n, err := s.src.Read(*bp)
			select {
			case s.ch <- chunk{bp, n, err}:
			case <-s.done:
				chunkPool.Put(bp)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

// Close stops an interactive stream's reader goroutine (once its source
// read returns). It is a no-op for other streams.
func (s *Stream) Close() error {
	if s.done != nil {
		s.once.Do(func() { close(s.done) })
	}
	return nil
}

// fill reads more input into s.in. In interactive mode it gives up after
// maxHold when bytes are being held, and reports that.
func (s *Stream) fill() (timedOut bool) {
	if s.in == nil {
		s.inP, s.outP = getBuf(), getBuf()
		s.in = (*s.inP)[:0]
		s.outBuf = (*s.outP)[:0]
	}
	if cap(s.in)-len(s.in) < streamChunk/2 {
		n := make([]byte, len(s.in), len(s.in)+streamChunk+s.m.maxLen)
		copy(n, s.in)
		s.in = n
	}
	if s.ch == nil {
		n, err := s.src.Read(s.in[len(s.in):cap(s.in)])
		s.in = s.in[:len(s.in)+n]
		if err != nil {
			s.srcErr = err
		}
		return false
	}
	var timeout <-chan time.Time
	if len(s.in) > 0 {
		t := time.NewTimer(s.maxHold)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case c := <-s.ch:
		s.in = append(s.in, (*c.b)[:c.n]...)
		chunkPool.Put(c.b)
		if c.err != nil {
			s.srcErr = c.err
		}
		return false
	case <-timeout:
		return true
	}
}

// bufSize is the size of pooled stream buffers: a read chunk plus room for
// the carry-over window and replacements that grow the data.
const bufSize = 2 * streamChunk

var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

func getBuf() *[]byte { return bufs.Get().(*[]byte) }

// release returns the buffers once the stream has ended (the ones it
// started with: a window that outgrew its buffer left that one unused).
func (s *Stream) release() {
	if s.inP != nil {
		bufs.Put(s.inP)
	}
	if s.outP != nil {
		bufs.Put(s.outP)
	}
	s.inP, s.outP = nil, nil
	s.in, s.outBuf, s.out = nil, nil, nil
}

// Read implements io.Reader.
func (s *Stream) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.srcErr != nil && len(s.in) == 0 {
			s.err = s.srcErr
			s.release()
			return 0, s.err
		}
		final := s.srcErr != nil
		if !final {
			before := len(s.in)
			if s.fill() {
				// Held bytes waited long enough: decide on what we have.
				final = true
			} else if len(s.in) == before && s.srcErr == nil {
				continue
			}
			final = final || s.srcErr != nil
		}
		if err := s.process(final); err != nil {
			s.err = err
			s.out = nil
			s.release()
			return 0, err
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// process moves what can be decided from s.in to s.out. Unless final, it
// keeps back only the shortest tail that could still grow into a match
// (never more than maxLen-1 bytes), so interactive streams are not delayed
// unless their bytes actually look like the start of a secret.
func (s *Stream) process(final bool) error {
	out := s.outBuf[:0]
	in := s.in
	for {
		i, lit := s.m.find(in)
		if i < 0 {
			break
		}
		if !final && s.m.pendingFrom(in) <= i {
			// A longer literal starting here (or earlier) could still
			// complete with more input: decide when it arrives.
			break
		}
		if lit.block != nil {
			return lit.block
		}
		out = append(out, in[:i]...)
		out = append(out, lit.to...)
		if s.used != nil {
			s.used(lit.secret)
		}
		in = in[i+len(lit.from):]
	}
	keep := 0
	if !final {
		keep = len(in) - s.m.pendingFrom(in)
	}
	out = append(out, in[:len(in)-keep]...)
	// Move the carry-over window to the front of the input buffer.
	n := copy(s.in, in[len(in)-keep:])
	s.in = s.in[:n]
	s.outBuf = out
	s.out = out
	return nil
}
