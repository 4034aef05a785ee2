package config

import (
	"errors"
	"path/filepath"
	"testing"
)

// GatewayLoader reads the standalone file, or the user config (its
// defaults when it has no gateway sections), and reports its warnings.
func TestGatewayLoader(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	standalone := write(t, filepath.Join(dir, "gateway.toml"), "[[network.rules]]\nhosts = [\"a.test\"]\n")
	user := write(t, filepath.Join(dir, "user.toml"), "version = 1\n[[network.rules]]\nhosts = [\"a.test\"]\n[[network.rules]]\nhosts = [\"b.test\"]\n")
	empty := write(t, filepath.Join(dir, "empty.toml"), "version = 1\n")
	bad := write(t, filepath.Join(dir, "bad.toml"), "version = 1\n[[network.rules]]\nhosts = [\"a*b.test\"]\n")
	tests := []struct {
		name, file, user string
		wantFile         string
		rules            int
		wantErr          error
	}{
		{"standalone file", standalone, user, standalone, 1, nil},
		{"user config", "", user, user, 2, nil},
		{"no gateway sections", "", empty, empty, 0, nil},
		{"invalid user config", "", bad, bad, 0, ErrInvalid},
		{"default user config", "", "", filepath.Join(dir, "config", "vak", "config.toml"), 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			load, file, err := GatewayLoader(tc.file, tc.user, func(w string) { t.Logf("warning: %s", w) })
			if err != nil || file != tc.wantFile {
				t.Fatalf("GatewayLoader: %q, %v; want %q", file, err, tc.wantFile)
			}
			cfg, err := load()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("load: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || cfg.Policy.Len() != tc.rules {
				t.Fatalf("load: %v, %d rule(s), want %d", err, cfg.Policy.Len(), tc.rules)
			}
		})
	}
}
