package fsguard

import (
	"path"
	"strings"
)

// A glob pattern is a slash-separated path pattern. Each segment is matched
// with path.Match (*, ?, [class], \ escapes; * also matches a leading dot),
// a segment that is exactly ** matches zero or more whole segments, and
// {a,b} alternatives expand into several patterns (doublestar style).
type globPattern []string

// compileGlob validates pattern, makes it workspace-relative like a path and
// expands its braces. A ".." segment anywhere is refused with ErrOutside.
func compileGlob(workspace, op, pattern string) ([]globPattern, error) {
	if err := validatePath(op, pattern); err != nil {
		return nil, err
	}
	p := pattern
	if path.IsAbs(p) {
		switch {
		case p == workspace || p == workspace+"/":
			return nil, pathError(op, pattern, ErrInvalidArgument, "pattern matches no file")
		case strings.HasPrefix(p, workspace+"/"):
			p = p[len(workspace)+1:]
		default:
			return nil, pathError(op, pattern, ErrOutside, "")
		}
	}
	alts, err := expandBraces(p)
	if err != nil {
		return nil, pathError(op, pattern, ErrInvalidArgument, err.Error())
	}
	var out []globPattern
	for _, a := range alts {
		var segs globPattern
		for _, s := range strings.Split(a, "/") {
			switch s {
			case "", ".":
				continue
			case "..":
				return nil, pathError(op, pattern, ErrOutside, "")
			}
			if s == "**" && len(segs) > 0 && segs[len(segs)-1] == "**" {
				continue
			}
			if s != "**" {
				if _, err := path.Match(s, ""); err != nil {
					return nil, pathError(op, pattern, ErrInvalidArgument, "malformed pattern")
				}
			}
			segs = append(segs, s)
		}
		if len(segs) == 0 {
			return nil, pathError(op, pattern, ErrInvalidArgument, "pattern matches no file")
		}
		out = append(out, segs)
	}
	return out, nil
}

type braceError string

func (e braceError) Error() string { return string(e) }

// expandBraces expands {a,b} alternatives (nested allowed, \ escapes
// respected) into at most maxBraceExpansions patterns.
func expandBraces(p string) ([]string, error) {
	open := -1
	depth := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '{':
			if depth == 0 {
				open = i
			}
			depth++
		case '}':
			if depth == 0 {
				return nil, braceError("unbalanced }")
			}
			depth--
			if depth > 0 {
				continue
			}
			// Split p[open+1:i] on top-level commas.
			var alts []string
			start, d := open+1, 0
			for j := open + 1; j < i; j++ {
				switch p[j] {
				case '\\':
					j++
				case '{':
					d++
				case '}':
					d--
				case ',':
					if d == 0 {
						alts = append(alts, p[start:j])
						start = j + 1
					}
				}
			}
			alts = append(alts, p[start:i])
			rests, err := expandBraces(p[i+1:])
			if err != nil {
				return nil, err
			}
			var out []string
			for _, a := range alts {
				heads, err := expandBraces(p[:open] + a)
				if err != nil {
					return nil, err
				}
				for _, h := range heads {
					for _, r := range rests {
						if len(out) >= maxBraceExpansions {
							return nil, braceError("too many {} alternatives")
						}
						out = append(out, h+r)
					}
				}
			}
			return out, nil
		}
	}
	if depth != 0 {
		return nil, braceError("unbalanced {")
	}
	return []string{p}, nil
}

// matchSegment matches one pattern segment against one name.
func matchSegment(pat, name string) bool {
	ok, _ := path.Match(pat, name)
	return ok
}

// match reports whether the pattern matches the path segments s, in
// O(len(p)*len(s)) segment matches (no exponential ** backtracking).
func (p globPattern) match(s []string) bool {
	n := len(s)
	next := make([]bool, n+1) // next[j]: p[i+1:] matches s[j:]
	next[n] = true
	cur := make([]bool, n+1)
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == "**" {
			cur[n] = next[n]
			for j := n - 1; j >= 0; j-- {
				cur[j] = next[j] || cur[j+1]
			}
		} else {
			cur[n] = false
			for j := n - 1; j >= 0; j-- {
				cur[j] = next[j+1] && matchSegment(p[i], s[j])
			}
		}
		next, cur = cur, next
	}
	return next[0]
}

// mayContain reports whether some path strictly beneath the directory dir
// could match the pattern (so a walk must descend into dir).
func (p globPattern) mayContain(dir []string) bool {
	for i, d := range dir {
		if i >= len(p) {
			return false
		}
		if p[i] == "**" {
			return true
		}
		if !matchSegment(p[i], d) {
			return false
		}
	}
	return len(p) > len(dir)
}

// literalPrefix is the leading segments without glob syntax, excluding the
// last segment (the walk always lists the directory holding the final name).
func (p globPattern) literalPrefix() []string {
	var out []string
	for _, s := range p[:len(p)-1] {
		if s == "**" || strings.ContainsAny(s, `*?[\`) {
			break
		}
		out = append(out, s)
	}
	return out
}

// commonPrefix is the longest segment prefix shared by all patterns' literal
// prefixes: the directory a walk can start from.
func commonPrefix(pats []globPattern) []string {
	prefix := pats[0].literalPrefix()
	for _, p := range pats[1:] {
		lp := p.literalPrefix()
		n := 0
		for n < len(prefix) && n < len(lp) && prefix[n] == lp[n] {
			n++
		}
		prefix = prefix[:n]
	}
	return prefix
}

func anyMatch(pats []globPattern, s []string) bool {
	for _, p := range pats {
		if p.match(s) {
			return true
		}
	}
	return false
}

func anyMayContain(pats []globPattern, dir []string) bool {
	for _, p := range pats {
		if p.mayContain(dir) {
			return true
		}
	}
	return false
}
