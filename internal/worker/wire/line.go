package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
)

// TooLarge is the error for a request line of size bytes, over
// MaxRequestBytes: it names both and says what to do. The worker answers
// it, Client returns it before sending such a request, and `vak mcp`
// answers a JSON-RPC line over the same limit with it.
func TooLarge(size int64) *Error {
	return Errorf(CodeTooLarge, "the request is %d bytes, over the limit of %d bytes (%d MiB) for one request: send smaller requests (split the data over several calls; create a large file with a command rather than in one write)", size, MaxRequestBytes, MaxRequestBytes>>20)
}

// Marshal encodes v as one line of the protocol (without its newline):
// JSON without the HTML escapes of json.Marshal, so that <, > and & cost
// one byte each, not six.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// LineReader reads the lines of a JSON-lines stream, each at most max
// bytes long without its newline. A longer line is read to its end
// without being kept, so the stream stays in step: Next reports its size
// and the value of its top-level "id" member, so that it can still be
// answered under its id.
type LineReader struct {
	br  *bufio.Reader
	max int
}

// NewLineReader reads lines of at most max bytes from r.
func NewLineReader(r io.Reader, max int) *LineReader {
	return &LineReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Line is one line of a LineReader.
type Line struct {
	// Data is the line without its newline (nil when TooLong).
	Data []byte
	// Size is the line's length without its newline.
	Size int64
	// TooLong reports a line over the limit.
	TooLong bool
	// ID is, for a TooLong line that is a JSON object, the raw value of
	// its first top-level "id" member when that is a string or a number
	// of at most MaxIDBytes bytes; nil otherwise.
	ID json.RawMessage
}

// StringID is ID when it is a JSON string, else "".
func (l Line) StringID() string {
	var s string
	if json.Unmarshal(l.ID, &s) != nil {
		return ""
	}
	return s
}

// Next reads the next line; at the end of the stream it returns the
// unterminated rest (possibly empty) with the reader's error.
func (lr *LineReader) Next() (Line, error) {
	var l Line
	var sc *idScanner
	for {
		frag, err := lr.br.ReadSlice('\n')
		body := frag
		if err == nil {
			body = frag[:len(frag)-1]
		}
		l.Size += int64(len(body))
		if sc == nil && l.Size > int64(lr.max) {
			sc = &idScanner{}
			sc.feed(l.Data)
			l.Data, l.TooLong = nil, true
		}
		if sc != nil {
			sc.feed(body)
		} else {
			l.Data = append(l.Data, body...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if sc != nil {
			l.ID = sc.result()
		}
		return l, err
	}
}

// MaxIDBytes bounds the id a LineReader recovers from a line over its
// limit.
const MaxIDBytes = 256

// idScanner finds the value of the first top-level "id" member of a JSON
// object fed to it in pieces, keeping nothing else: it tracks the nesting
// depth and strings, and captures only the keys and the id value at depth
// one. Input that is not an object yields no id.
type idScanner struct {
	depth     int
	inStr     bool
	esc       bool
	expectKey bool // the next string at depth one is a key
	inKey     bool
	key       []byte // the raw key being read (quotes and escapes included)
	idKey     bool   // the last key at depth one was "id"
	capture   int
	val       []byte
	found     json.RawMessage
	done      bool
}

// capture states of idScanner.
const (
	capNone   = iota
	capAwait  // after `"id":`, before its value
	capString // inside the id's string value
	capNumber // inside the id's number value
)

// maxKeyBytes bounds a key the scanner compares with "id" (raw, so that
// an escaped "\u0069\u0064" still counts).
const maxKeyBytes = 16

func (s *idScanner) feed(p []byte) {
	for _, b := range p {
		if s.done {
			return
		}
		if s.inStr {
			s.strByte(b)
		} else {
			s.byteOutside(b)
		}
	}
}

// strByte handles one byte inside a string.
func (s *idScanner) strByte(b byte) {
	if s.inKey && len(s.key) <= maxKeyBytes {
		s.key = append(s.key, b)
	}
	if s.capture == capString {
		s.val = append(s.val, b)
		if len(s.val) > MaxIDBytes {
			s.done = true
			return
		}
	}
	switch {
	case s.esc:
		s.esc = false
	case b == '\\':
		s.esc = true
	case b == '"':
		s.inStr = false
		if s.inKey {
			var k string
			s.inKey = false
			s.idKey = len(s.key) <= maxKeyBytes && json.Unmarshal(s.key, &k) == nil && k == "id"
		}
		if s.capture == capString {
			s.found, s.done = s.val, true
		}
	}
}

// byteOutside handles one byte outside strings.
func (s *idScanner) byteOutside(b byte) {
	if s.capture == capNumber {
		if bytes.IndexByte([]byte("0123456789+-.eE"), b) >= 0 {
			s.val = append(s.val, b)
			if len(s.val) > MaxIDBytes {
				s.done = true
			}
			return
		}
		s.found, s.done = s.val, true
		return
	}
	switch b {
	case ' ', '\t', '\r', '\n':
		return
	case '{', '[':
		if s.depth == 0 && b != '{' || s.capture == capAwait {
			s.done = true // not an object, or an id that is not a scalar
			return
		}
		s.depth++
		s.expectKey = s.depth == 1
		return
	case '}', ']':
		s.depth--
		s.done = s.depth <= 0
		return
	case '"':
		s.inStr = true
		switch {
		case s.depth != 1:
		case s.expectKey:
			s.inKey, s.expectKey, s.key = true, false, append(s.key[:0], b)
		case s.capture == capAwait:
			s.capture, s.val = capString, append(s.val[:0], b)
		}
		return
	}
	if s.depth == 0 {
		s.done = true // not an object
		return
	}
	if s.depth != 1 {
		return
	}
	switch {
	case b == ':':
		if s.idKey {
			s.capture = capAwait
		}
		s.idKey = false
	case b == ',':
		s.expectKey, s.capture = true, capNone
	case s.capture == capAwait && (b == '-' || b >= '0' && b <= '9'):
		s.capture, s.val = capNumber, append(s.val[:0], b)
	case s.capture == capAwait:
		s.done = true // true, false, null: no id
	}
}

// result is the id found: valid JSON, a string or a number; or nil.
func (s *idScanner) result() json.RawMessage {
	if s.found == nil || !json.Valid(s.found) {
		return nil
	}
	return append(json.RawMessage(nil), s.found...)
}
