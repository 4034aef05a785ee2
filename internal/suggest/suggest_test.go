package suggest

import (
	"reflect"
	"slices"
	"testing"
)

func TestNearest(t *testing.T) {
	keys := []string{"backend", "mode", "image", "user", "timeout", "limits", "allow_weaker", "read", "write", "env", "home"}
	for _, tc := range []struct {
		name, want string
	}{
		{"bakend", "backend"},            // a deletion
		{"backennd", "backend"},          // an insertion
		{"imgae", "image"},               // a swap is one edit
		{"Backend", "backend"},           // case
		{"allow-weaker", "allow_weaker"}, // '-' for '_'
		{"timout", "timeout"},
		{"mdoe", "mode"},
		{"moda", "mode"},
		// Not close: nothing is suggested.
		{"memory", ""},
		{"xyz", ""},
		{"", ""},
		{"sandbox_backend", ""},
		// A short name needs a near-exact match: "usr" is one edit from
		// "user", "ev" one from "env", "pids" two from anything.
		{"usr", "user"},
		{"ev", "env"},
		{"pids", ""},
		// The name itself is never its own suggestion.
		{"mode", ""},
	} {
		if got := Nearest(tc.name, keys); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	// Ties go to the earlier candidate.
	if got := Nearest("ab", []string{"xb", "ax"}); got != "xb" {
		t.Errorf("tie: %q", got)
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"ab", "ba", 1}, {"abc", "acb", 1}, {"ca", "abc", 3}, {"backend", "bakend", 1},
	} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := distance(tc.b, tc.a); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

type rule struct {
	Name  *string  `toml:"name"`
	Hosts []string `toml:"hosts"`
}

type secret struct {
	Value *string `toml:"value"`
	Hosts []string
}

type doc struct {
	Version *int64 `toml:"version"`
	Sandbox *struct {
		Backend *string `toml:"backend"`
		Limits  *struct {
			Memory *string `toml:"memory"`
		} `toml:"limits"`
	} `toml:"sandbox"`
	Network *struct {
		Rules []rule `toml:"rules"`
	} `toml:"network"`
	Secrets map[string]*secret `toml:"secrets"`
	Skip    *string            `toml:"-"`
	raw     []byte             // unexported: never a key
}

func TestTOMLKeys(t *testing.T) {
	typ := reflect.TypeOf(doc{raw: nil})
	for _, tc := range []struct {
		key  []string
		want []string
	}{
		{[]string{"sandbx"}, []string{"version", "sandbox", "network", "secrets"}},
		{[]string{"sandbox", "bakend"}, []string{"backend", "limits"}},
		{[]string{"sandbox", "limits", "memroy"}, []string{"memory"}},
		{[]string{"network", "rules", "hostz"}, []string{"name", "hosts"}},
		// A map's key is any name; below it, the element's keys (an
		// untagged field has none).
		{[]string{"secrets", "TOKEN", "valeu"}, []string{"value"}},
		// Paths that leave the structs: nothing to suggest.
		{[]string{"sandbox", "backend", "x"}, nil},
		{[]string{"nope", "x"}, nil},
		{nil, nil},
	} {
		if got := TOMLKeys(typ, tc.key); !slices.Equal(got, tc.want) {
			t.Errorf("TOMLKeys(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func FuzzNearest(f *testing.F) {
	f.Add("bakend", "backend")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, a, b string) {
		d := distance(a, b)
		if d < 0 || d > max(len(a), len(b)) || d != distance(b, a) || (d == 0) != (a == b) {
			t.Fatalf("distance(%q, %q) = %d", a, b, d)
		}
		if s := Nearest(a, []string{b}); s != "" && (s != b || a == b) {
			t.Fatalf("Nearest(%q, [%q]) = %q", a, b, s)
		}
	})
}
