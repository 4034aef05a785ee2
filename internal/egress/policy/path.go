package policy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadPath means a request path or a path pattern is not canonical.
var ErrBadPath = errors.New("malformed path")

// PathPattern matches percent-decoded, canonical request paths.
//
// Without '*', a pattern is a prefix on segment boundaries: "/repos" matches
// "/repos" and "/repos/x" but not "/repository"; a pattern ending in '/'
// ("/v1/") matches everything below it. With '*', the pattern is a glob over
// segments: '*' inside a segment matches any run of characters except '/',
// and a segment that is exactly "**" matches zero or more whole segments.
type PathPattern struct {
	raw  string
	glob []string // segments when the pattern has '*'
}

// ParsePathPattern validates a path pattern: it must start with '/', contain
// no dot segments, empty segments ("//"), '?', '#', '\' or control bytes.
func ParsePathPattern(s string) (PathPattern, error) {
	if !strings.HasPrefix(s, "/") {
		return PathPattern{}, fmt.Errorf("%w: %q: must start with '/'", ErrBadPath, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c == 0x7f || c == '?' || c == '#' || c == '\\' || c == ' ' {
			return PathPattern{}, fmt.Errorf("%w: %q: character %q not allowed", ErrBadPath, s, c)
		}
	}
	segs := strings.Split(s[1:], "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		if seg == "" && !last {
			return PathPattern{}, fmt.Errorf("%w: %q: empty segment", ErrBadPath, s)
		}
		if seg == "." || seg == ".." {
			return PathPattern{}, fmt.Errorf("%w: %q: dot segment", ErrBadPath, s)
		}
		if strings.Contains(seg, "**") && seg != "**" {
			return PathPattern{}, fmt.Errorf("%w: %q: \"**\" must be a whole segment", ErrBadPath, s)
		}
	}
	p := PathPattern{raw: s}
	if strings.Contains(s, "*") {
		p.glob = segs
	}
	return p, nil
}

// String is the pattern text.
func (p PathPattern) String() string { return p.raw }

// Match reports whether the canonical path matches.
func (p PathPattern) Match(path string) bool {
	if p.glob != nil {
		if !strings.HasPrefix(path, "/") {
			return false
		}
		return globSegs(p.glob, strings.Split(path[1:], "/"))
	}
	if strings.HasSuffix(p.raw, "/") {
		return strings.HasPrefix(path, p.raw)
	}
	return path == p.raw || strings.HasPrefix(path, p.raw+"/")
}

func globSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			for i := 0; i <= len(segs); i++ {
				if globSegs(rest, segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 || !globSeg(pat[0], segs[0]) {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// globSeg matches one segment where '*' matches any run of bytes.
func globSeg(pat, s string) bool {
	star := strings.IndexByte(pat, '*')
	if star < 0 {
		return pat == s
	}
	prefix := pat[:star]
	if !strings.HasPrefix(s, prefix) {
		return false
	}
	s = s[len(prefix):]
	pat = pat[star+1:]
	for {
		star = strings.IndexByte(pat, '*')
		if star < 0 {
			return strings.HasSuffix(s, pat)
		}
		lit := pat[:star]
		i := strings.Index(s, lit)
		if i < 0 {
			return false
		}
		s = s[i+len(lit):]
		pat = pat[star+1:]
	}
}

// CanonicalPath checks a percent-decoded request path before it is matched:
// it must start with '/', and contain no dot segments, empty segments,
// backslashes or control bytes. Such paths are refused rather than cleaned,
// because the upstream server might resolve them differently than the policy
// would.
func CanonicalPath(p string) error {
	if p == "" {
		return nil // "*" requests (OPTIONS *) and empty paths mean "/"
	}
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w: %q: must start with '/'", ErrBadPath, p)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < ' ' || c == 0x7f || c == '\\' {
			return fmt.Errorf("%w: control byte or backslash at %d", ErrBadPath, i)
		}
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		if seg == "" && i != len(segs)-1 {
			return fmt.Errorf("%w: %q: empty segment", ErrBadPath, p)
		}
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q: dot segment", ErrBadPath, p)
		}
	}
	return nil
}
