package landlock

import (
	"os"
	"strings"
	"testing"
)

// Stage 1 starts stage 2 only after the broker's go-ahead: the byte it
// writes once stage 1 is in the session's cgroup. A closed pipe (the
// broker failed, or died) or anything else refuses; the go-ahead passes
// (control).
func TestGoAhead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		write   []byte
		wantErr string
	}{
		{"go-ahead", []byte{goAheadByte}, ""},
		{"closed without it", nil, "did not confirm"},
		{"another byte", []byte{'X'}, "did not confirm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.write) > 0 {
				w.Write(tc.write)
			}
			w.Close()
			err = readGoAhead(r)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused the go-ahead: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
