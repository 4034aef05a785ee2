package secrets

import "strings"

// SeedSession returns a Session that holds only placeholders (name ->
// placeholder), as the prev of NewSession: a gateway restarted with its
// state keeps the placeholders its sandboxes already have in their
// environment. Entries that are not placeholders are ignored.
func SeedSession(placeholders map[string]string) *Session {
	s := &Session{byName: map[string]int{}}
	for name, ph := range placeholders {
		if !strings.HasPrefix(ph, PlaceholderPrefix) || len(ph) != len(PlaceholderPrefix)+32 {
			continue
		}
		s.byName[name] = len(s.placeholders)
		s.placeholders = append(s.placeholders, ph)
	}
	return s
}

// NewPlaceholder returns a fresh random placeholder (for a topology whose
// sandboxes' environment is written before its gateway starts: the
// dev-container template seeds the gateway with it).
func NewPlaceholder() string { return newPlaceholder() }
