// Package shellquote quotes strings for POSIX sh.
//
// Quote uses single quotes, inside which sh interprets nothing, and writes an
// embedded single quote as a closing quote, a backslash-escaped quote and an
// opening quote:
//
//	it's  ->  'it'\''s'
//
// The result is safe at any nesting depth: quoting a string that already
// contains quoted words just quotes it again, so a command wrapped as
// `sh -c QUOTED` and then wrapped once more in another `sh -c` (the broker's
// bash request around the docker wrapper) reaches the innermost shell byte
// for byte.
//
// NUL cannot be passed in an argv element, so strings containing NUL are
// rejected by Check; Quote itself never fails.
package shellquote

import (
	"errors"
	"strings"
)

// ErrNUL reports a string containing a NUL byte, which no argv can carry.
var ErrNUL = errors.New("shellquote: string contains NUL byte")

// Quote returns s quoted for POSIX sh. Words made only of characters that sh
// never interprets are returned unchanged, which keeps wrapped command lines
// readable in logs.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if isSafe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			b.WriteString(`'\''`)
			continue
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('\'')
	return b.String()
}

// Join quotes each argument and joins them with spaces, giving a command line
// that sh splits back into exactly args.
func Join(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

// Check returns ErrNUL if any argument contains a NUL byte.
func Check(args ...string) error {
	for _, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return ErrNUL
		}
	}
	return nil
}

// isSafe reports whether s consists only of bytes that sh treats literally in
// every position. '=' is excluded (it would make a leading word an
// assignment), as are '~' (tilde expansion) and '#' (comment at word start).
func isSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == '/' || c == ',' || c == ':' || c == '@' || c == '%' || c == '+':
		default:
			return false
		}
	}
	return true
}
