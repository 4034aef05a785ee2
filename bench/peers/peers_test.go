package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShellJoin runs the quoted words through a real sh: srt takes its
// command as one string, so every argument must come back unchanged.
func TestShellJoin(t *testing.T) {
	for _, args := range [][]string{
		{"true"},
		{"a b", "it's", `"q"`, "$HOME", "`id`", `back\slash`, ""},
	} {
		out, err := exec.Command("sh", "-c", "printf '%s|' "+shellJoin(args)).Output()
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if want := strings.Join(args, "|") + "|"; string(out) != want {
			t.Errorf("%q came back as %q, want %q", args, out, want)
		}
	}
}
