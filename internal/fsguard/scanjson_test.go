package fsguard

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// A Scan survives its encoding whole, the listing Lacks answers from
// included, and a decoded Scan never holds a listing Lacks would misread.
func FuzzScanJSON(f *testing.F) {
	f.Add([]byte(`{"git":{"a/.git":{"Kind":1,"Via":"","Dev":1,"Ino":2,"Mode":16877}},"setuid":["x"],"root_fold":[".git","a"],"root_listed":true}`))
	f.Add([]byte(`{"git":{},"root_fold":["B","a"],"root_listed":true}`))
	f.Add([]byte(`{"git":{},"root_fold":["a"]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Scan
		if json.Unmarshal(b, &s) != nil {
			return
		}
		if !slices.IsSorted(s.rootFold) || (!s.rootListed && len(s.rootFold) > 0) {
			t.Fatalf("decoded a listing Lacks would misread: %q listed %v", s.rootFold, s.rootListed)
		}
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var again Scan
		if err := json.Unmarshal(enc, &again); err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !maps.Equal(again.Git, s.Git) || !slices.Equal(again.Setuid, s.Setuid) || again.Truncated != s.Truncated ||
			!slices.Equal(again.rootFold, s.rootFold) || again.rootListed != s.rootListed {
			t.Fatalf("changed through its encoding: %+v then %+v", s, again)
		}
		for _, name := range []string{".git", "a", "B", ".vscode"} {
			if again.Lacks(name) != s.Lacks(name) {
				t.Fatalf("Lacks(%q) changed through the encoding", name)
			}
		}
	})
}
