// Package suggest finds the valid name nearest to a mistyped one, for
// errors that ask "did you mean ...?": Nearest compares a name with the
// valid ones by edit distance and answers only when one is close, and
// TOMLKeys lists the keys valid where an unknown key of a strictly decoded
// TOML document stands (config files: internal/config,
// internal/egress/egressconfig). It depends on nothing of vak's.
package suggest

import (
	"reflect"
	"strings"
)

// Nearest returns the candidate closest to name, or "" when none is close.
// Distance is the optimal string alignment distance (an insertion,
// deletion, substitution or swap of two neighbouring characters is one
// edit; case and '-' for '_' count as edits), and a candidate is close
// when its distance is at most a third of the longer name's length, and
// at least 1. Ties go to the earlier candidate; name itself is never
// suggested.
func Nearest(name string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		if c == name {
			continue
		}
		d := distance(name, c)
		if d > max(1, max(len(name), len(c))/3) {
			continue
		}
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the optimal string alignment distance between a and b
// (bytes: config keys are ASCII).
func distance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// TOMLKeys returns the keys valid in the table that holds the last segment
// of the key path key, in a document decoded into a value of type t
// (go-toml's `toml` struct tags; a key path as go-toml's
// StrictMissingError reports it, without array indices). A map consumes
// one segment (its key: [secrets.NAME]) and a slice stands for its
// elements ([[network.rules]]). It returns nil where the path leaves t's
// structs.
func TOMLKeys(t reflect.Type, key []string) []string {
	if len(key) == 0 {
		return nil
	}
	for _, seg := range key[:len(key)-1] {
		t = table(t)
		if t == nil {
			return nil
		}
		if t.Kind() == reflect.Map {
			t = t.Elem()
			continue
		}
		f, ok := field(t, seg)
		if !ok {
			return nil
		}
		t = f.Type
	}
	t = table(t)
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		if name := tagName(t.Field(i)); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// table dereferences pointers and slices down to a struct or a map, or
// returns nil.
func table(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct && t.Kind() != reflect.Map {
		return nil
	}
	return t
}

// field finds the field of struct t whose TOML name is name.
func field(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); tagName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// tagName is f's TOML key ("" for an unexported or untagged field, which
// go-toml's strict decoding of vak's wire structs never fills).
func tagName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if name == "-" {
		return ""
	}
	return name
}
