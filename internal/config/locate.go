package config

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// withLine gives a validation error the line of its key, when the file
// shows where the key is: the decoder already reports positions for decode
// errors, and validation errors name the key, which locate finds.
func withLine(err error, data []byte) error {
	var e *Error
	if errors.As(err, &e) && e.Line == 0 && e.Key != "" && len(data) > 0 {
		e.Line = locate(data, e.Key)
	}
	return err
}

var (
	headerRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\[(\[?)\s*([^\[\]]+?)\s*\]?\]\s*(#.*)?$`) })
	indexRe  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\[(\d+)\]`) })
)

// locate returns the 1-based line of the TOML key path key (as config
// errors spell it: "sandbox.limits.memory", "network.rules[2].hosts[0]",
// "secrets.TOKEN") in data, or 0. Array element indices after a key are
// ignored (the key's line is the answer); an index after an array of
// tables picks that table.
func locate(data []byte, key string) int {
	want := normalize(key)
	var table []string
	counts := map[string]int{}
	best, bestLen := 0, 0
	consider := func(path []string, line int) {
		// An exact match wins; otherwise the deepest table or key that
		// contains the wanted one (e.g. the header of a table whose key is
		// missing).
		n := len(path)
		if n > len(want) || n <= bestLen {
			return
		}
		for i := range path {
			if path[i] != want[i] {
				return
			}
		}
		best, bestLen = line, n
	}
	for i, raw := range strings.Split(string(data), "\n") {
		l := strings.TrimSpace(raw)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if m := headerRe().FindStringSubmatch(l); m != nil && strings.HasPrefix(l, "[") {
			name := splitKey(m[2])
			if m[1] == "[" { // [[array of tables]]
				k := strings.Join(name, ".")
				name[len(name)-1] += "[" + strconv.Itoa(counts[k]) + "]"
				counts[k]++
			}
			table = name
			consider(table, i+1)
			continue
		}
		k, _, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		consider(append(append([]string(nil), table...), splitKey(k)...), i+1)
	}
	return best
}

// normalize splits a config error's key path into segments, keeping the
// index of an array of tables on its segment only where the file can have
// one (every segment but the last).
func normalize(key string) []string {
	out := splitKey(key)
	// The last segment's indices are element indices of a plain array.
	if n := len(out); n > 0 {
		out[n-1] = indexRe().ReplaceAllString(out[n-1], "")
	}
	return out
}

// splitKey splits a dotted TOML key, unquoting quoted parts (which may
// hold dots).
func splitKey(k string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	flush := func() {
		p := strings.TrimSpace(cur.String())
		if uq, err := strconv.Unquote(p); err == nil {
			p = uq
		} else if len(p) >= 2 && p[0] == '\'' && p[len(p)-1] == '\'' {
			p = p[1 : len(p)-1]
		}
		out = append(out, p)
		cur.Reset()
	}
	for _, r := range strings.TrimSpace(k) {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '"' || r == '\''):
			quote = r
		case quote == 0 && r == '.':
			flush()
			continue
		}
		cur.WriteRune(r)
	}
	flush()
	return out
}
