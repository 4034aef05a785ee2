package hostenv

import (
	"slices"
	"testing"
)

func TestAllowlists(t *testing.T) {
	all, proc := Allowlist("EXTRA"), ProcessAllowlist("EXTRA")
	for _, n := range []string{"LANG", "LANGUAGE", "LC_ALL", "TERM", "TZ", "COLORTERM", "NO_COLOR", "EXTRA"} {
		if !slices.Contains(all, n) || !slices.Contains(proc, n) {
			t.Errorf("%s missing: %v / %v", n, all, proc)
		}
	}
	for _, n := range []string{"PATH", "USER", "LOGNAME"} {
		if slices.Contains(all, n) || !slices.Contains(proc, n) {
			t.Errorf("%s: host-only names belong to ProcessAllowlist only: %v / %v", n, all, proc)
		}
	}
	// The returned slices are copies: editing one changes no other answer.
	all[0] = "SECRET"
	if slices.Contains(Allowlist(), "SECRET") {
		t.Fatal("Allowlist returned its own list")
	}
}

func TestLookupAndDefaults(t *testing.T) {
	t.Setenv("LC_ALL", "C")
	t.Setenv("PATH", "")
	t.Setenv("VAK_TEST_SECRET", "leak")
	for _, tc := range []struct {
		name string
		env  []string
		want []string
		not  []string
	}{
		{"process", ForProcess(), []string{"LC_ALL=C", "PATH="}, []string{"VAK_TEST_SECRET=leak"}},
		{"container", ForContainer(), []string{"LC_ALL=C"}, []string{"PATH=", "VAK_TEST_SECRET=leak"}},
		{"extra", ForContainer("VAK_TEST_SECRET", "VAK_TEST_SECRET"), []string{"VAK_TEST_SECRET=leak"}, nil},
		{"lookup once", Lookup([]string{"LC_ALL", "LC_ALL"}), []string{"LC_ALL=C"}, nil},
	} {
		for _, w := range tc.want {
			if !slices.Contains(tc.env, w) {
				t.Errorf("%s: %v lacks %s", tc.name, tc.env, w)
			}
		}
		for _, n := range tc.not {
			if slices.Contains(tc.env, n) {
				t.Errorf("%s: %v has %s", tc.name, tc.env, n)
			}
		}
	}
	if got := Lookup([]string{"LC_ALL", "LC_ALL"}); len(got) != 1 {
		t.Errorf("Lookup repeated a name: %v", got)
	}
	if got := WithDefaultPath(nil); !slices.Equal(got, []string{"PATH=" + DefaultPath}) {
		t.Errorf("WithDefaultPath(nil) = %v", got)
	}
	if got := Set([]string{"A=1", "B=2", "A=3"}, "A=4"); !slices.Equal(got, []string{"B=2", "A=4"}) {
		t.Errorf("Set = %v", got)
	}
	if Has([]string{"AB=1"}, "A") {
		t.Error("Has matched a prefix of a longer name")
	}
}
