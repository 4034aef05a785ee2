package shellquote

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "''"},
		{"abc", "abc"},
		{"/usr/bin/x-y_z.1", "/usr/bin/x-y_z.1"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"'", `''\'''`},
		{"$HOME", "'$HOME'"},
		{"a=b", "'a=b'"},
		{"~", "'~'"},
		{"#x", "'#x'"},
		{"-n", "-n"},
		{"\n", "'\n'"},
	} {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	if err := Check("a", "b c"); err != nil {
		t.Fatal(err)
	}
	if err := Check("a", "b\x00c"); err != ErrNUL {
		t.Fatalf("Check with NUL = %v, want ErrNUL", err)
	}
}

// shPrintf runs input through two shells exactly as the broker does for a
// command-scoped backend: the inner command line is `printf %s QUOTED`, the
// wrapper is `sh -c INNER` (as docker would run it), and the wrapper's argv is
// joined into one string that an outer `sh -c` runs (the worker's bash tool).
func shPrintf(t testing.TB, input string) []byte {
	t.Helper()
	inner := Join([]string{"printf", "%s", input})
	wrapper := Join([]string{"sh", "-c", inner})
	var out, errb bytes.Buffer
	cmd := exec.Command("sh", "-c", wrapper)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("sh -c %q: %v: %s", wrapper, err, errb.String())
	}
	return out.Bytes()
}

func TestRoundTripThroughTwoShells(t *testing.T) {
	var all []byte
	for i := 1; i < 256; i++ {
		all = append(all, byte(i))
	}
	for _, in := range []string{
		"", "plain", "two words", "'", "''", `'\''`, `"`, `\`, `\\'`, "$(id)", "`id`",
		"${HOME}", "a;b|c&d", "*", "?", "[a]", "~root", "#comment", "\n\t ", "-e", "--",
		"%s%d%%", "日本語", "\xff\xfe", string(all),
	} {
		if got := shPrintf(t, in); string(got) != in {
			t.Errorf("round trip of %q gave %q", in, got)
		}
	}
}

func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a", "it's", `'\''`, "$(x)", "a\nb", "\x01\x7f\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.IndexByte(s, 0) >= 0 {
			if Check(s) != ErrNUL {
				t.Fatal("Check accepted NUL")
			}
			return
		}
		if got := shPrintf(t, s); string(got) != s {
			t.Fatalf("round trip of %q gave %q", s, got)
		}
	})
}
