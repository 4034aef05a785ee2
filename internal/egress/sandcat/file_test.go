package sandcat

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ConvertFile writes a new 0600 file (never over an existing one) or to
// stdout, and reports the notes.
func TestConvertFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "settings.json")
	if err := os.WriteFile(in, []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	exists := filepath.Join(dir, "exists.toml")
	os.WriteFile(exists, nil, 0o600)
	tests := []struct {
		name, in, out string
		fails         bool
	}{
		{"to stdout", in, "", false},
		{"to a new file", in, filepath.Join(dir, "vak.toml"), false},
		{"not over a file", in, exists, true},
		{"missing settings", filepath.Join(dir, "none.json"), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			var notes []string
			err := ConvertFile(tc.in, tc.out, &stdout, func(n string) { notes = append(notes, n) })
			if (err != nil) != tc.fails {
				t.Fatalf("ConvertFile: %v", err)
			}
			if tc.fails {
				return
			}
			got := stdout.Bytes()
			if tc.out != "" {
				fi, err := os.Stat(tc.out)
				if err != nil || fi.Mode().Perm() != 0o600 || stdout.Len() != 0 {
					t.Fatalf("output file %v %v, stdout %q", fi, err, stdout.String())
				}
				got, _ = os.ReadFile(tc.out)
			}
			if !strings.Contains(string(got), "[[network.rules]]") || len(notes) == 0 {
				t.Fatalf("notes %q, TOML:\n%s", notes, got)
			}
		})
	}
}
