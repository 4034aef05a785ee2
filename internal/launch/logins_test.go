package launch

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"vak/internal/egress/logins"
)

// TestHostLogin: the CLI's file under the home, or --from; a missing file
// is an error naming it (on macOS the Keychain is asked first for Claude
// Code, which keeps its login there).
func TestHostLogin(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	claude, _ := logins.ClientNamed("claude")
	if claude.Keychain == "" {
		t.Fatal("claude has no Keychain item")
	}
	if runtime.GOOS != "darwin" {
		_, _, err := hostLogin(context.Background(), claude, "")
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(home, claude.File)) {
			t.Fatalf("no login file: %v", err)
		}
	}
	p := filepath.Join(home, claude.File)
	os.MkdirAll(filepath.Dir(p), 0o700)
	os.WriteFile(p, []byte(`{"claudeAiOauth":{}}`), 0o600)
	data, from, err := hostLogin(context.Background(), claude, "")
	if err != nil || from != p || string(data) != `{"claudeAiOauth":{}}` {
		t.Fatalf("the home's file: %q %s %v", data, from, err)
	}
	other := filepath.Join(t.TempDir(), "creds.json")
	os.WriteFile(other, []byte(`{}`), 0o600)
	if data, from, err := hostLogin(context.Background(), claude, other); err != nil || from != other || string(data) != `{}` {
		t.Fatalf("--from: %q %s %v", data, from, err)
	}
}
