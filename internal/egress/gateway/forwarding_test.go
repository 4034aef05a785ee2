package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRequireNoForwarding: a gateway that must not route refuses to start
// when forwarding is on (or cannot be verified), before it opens anything.
func TestRequireNoForwarding(t *testing.T) {
	dir := t.TempDir()
	on := filepath.Join(dir, "on")
	off := filepath.Join(dir, "off")
	os.WriteFile(on, []byte("1\n"), 0o600)
	os.WriteFile(off, []byte("0\n"), 0o600)
	tests := []struct {
		file string
		want string // "" means no error
	}{
		{off, ""},
		{on, "must not forward packets"},
		{filepath.Join(dir, "missing"), "cannot verify"},
	}
	for _, tc := range tests {
		err := checkNoForwarding(tc.file)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkNoForwarding(%s) = %v, want %q", filepath.Base(tc.file), err, tc.want)
		}
	}
	g, err := New(Options{Load: nil, StateDir: dir, RequireNoForwarding: true, forwardFile: on})
	if err == nil || !strings.Contains(err.Error(), "must not forward packets") {
		t.Fatalf("New with forwarding on = %v, %v; want the forwarding error", g, err)
	}
}
