package taskenv

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// The patterns validTask and ValidID implement by hand, as regexps: the
// oracle of the tests below.
var (
	taskOracle = regexp.MustCompile(taskPattern)
	idOracle   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}-[0-9a-f]{10}$`)
)

func TestValidTaskAndID(t *testing.T) {
	long := strings.Repeat("a", 40)
	for _, tc := range []struct {
		s        string
		task, id bool
	}{
		{"default", true, false},
		{"a", true, false},
		{long, true, false},
		{long + "a", false, false},
		{"_x", false, false},
		{"-x", false, false},
		{".x", false, false},
		{"x/y", false, false},
		{"x y", false, false},
		{"ä", false, false},
		{"", false, false},
		{"default-0123456789", true, true},
		{"default-abcdef0123", true, true},
		{"default-ABCDEF0123", true, false}, // upper-case hash
		{"default-012345678", true, false},  // hash too short
		{"a-b-0123456789", true, true},
		{"-0123456789", false, false},
		{"x--0123456789", true, true},
		{long + "-0123456789", false, true},
		{long + "a-0123456789", false, false},
		{"../x-0123456789", false, false},
		{"x-0123456789\n", false, false},
		{"default_0123456789", true, false},
		{SessionID("default", "/w"), true, true},
	} {
		if got := validTask(tc.s); got != tc.task {
			t.Errorf("validTask(%q) = %v, want %v", tc.s, got, tc.task)
		}
		if got := ValidID(tc.s); got != tc.id {
			t.Errorf("ValidID(%q) = %v, want %v", tc.s, got, tc.id)
		}
		if taskOracle.MatchString(tc.s) != tc.task || idOracle.MatchString(tc.s) != tc.id {
			t.Errorf("the table disagrees with the patterns on %q", tc.s)
		}
	}
}

// FuzzValidID checks the hand-written checks against the patterns (IDs
// come from the command line: vak session exec ID).
func FuzzValidID(f *testing.F) {
	for _, s := range []string{"default-0123456789", "a-b-0123456789", "x", "", "-", "a\x00-0123456789", strings.Repeat("a", 41) + "-0123456789"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidID(s), idOracle.MatchString(s); got != want {
			t.Errorf("ValidID(%q) = %v, the pattern says %v", s, got, want)
		}
		if got, want := validTask(s), taskOracle.MatchString(s); got != want {
			t.Errorf("validTask(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}

// TestCheckSpecNamesTheTaskPattern: a bad task name is refused with the
// pattern it must match (the message once printed a function value).
func TestCheckSpecNamesTheTaskPattern(t *testing.T) {
	_, err := checkSpec(Spec{Task: "../evil"})
	if !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("checkSpec(task ../evil) = %v, want ErrInvalidSpec", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `"../evil"`) || !strings.Contains(msg, taskPattern) {
		t.Errorf("the refusal does not name the task and the pattern: %s", msg)
	}
	// The control: a valid name passes the task check (the spec then
	// fails on its empty workspace, a later check).
	if _, err := checkSpec(Spec{Task: "ok-task.1"}); err == nil || strings.Contains(err.Error(), "must match") {
		t.Errorf("control: checkSpec(task ok-task.1) = %v, want the workspace refused, not the task", err)
	}
}

// isAlnum shares validTask's byte predicate: ASCII letters and digits
// only, never empty.
func TestIsAlnum(t *testing.T) {
	for s, want := range map[string]bool{"abc123": true, "Z": true, "": false, "a-b": false, "a b": false, "é": false, "a\xff": false, "TERM": true} {
		if got := isAlnum(s); got != want {
			t.Errorf("isAlnum(%q) = %v, want %v", s, got, want)
		}
	}
}
