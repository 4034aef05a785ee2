package fsguard

// What only the Linux implementation uses (openat2 with RESOLVE_BENEATH);
// other platforms have a Root that every operation refuses.

import "sync"

// binarySniffBytes is how much of a file grep inspects for a NUL byte.
const binarySniffBytes = 8000

// Root gives the file tools access to one workspace. Create it with Open.
type Root struct {
	mu        sync.RWMutex // held for reading by every operation, for writing by Close
	fd        int          // O_PATH descriptor on the workspace; -1 once closed
	path      string       // canonical absolute workspace path
	opts      Options
	protected [][]string // cleaned protected entries, split into segments
}

func (o Options) withDefaults() Options {
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	if o.MaxWriteBytes <= 0 {
		o.MaxWriteBytes = DefaultMaxWriteBytes
	}
	return o
}

// clampMax applies the default and the hard cap to a result count.
func clampMax(max int) int {
	if max <= 0 {
		return DefaultMaxResults
	}
	return min(max, MaxResults)
}

// patternCost is the match work per path segment for a set of patterns.
func patternCost(pats []globPattern) int {
	n := 0
	for _, p := range pats {
		n += len(p)
	}
	return n
}
