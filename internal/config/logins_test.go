package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// [logins] is trusted-only: a project config that names a login (its own
// token URL, say, to learn which tokens the gateway would rewrite) is
// ignored with a warning; the user config's logins apply.
func TestLoginsTrustedOnly(t *testing.T) {
	dir := t.TempDir()
	user := write(t, filepath.Join(dir, "user.toml"), "version = 1\n[network]\npolicy = \"proxied\"\n[[network.rules]]\nhosts = [\"api.anthropic.com\"]\n[logins.claude]\nprovider = \"anthropic\"\n")
	ws := filepath.Join(dir, "ws")
	write(t, filepath.Join(ws, ".vak", "config.toml"), "version = 1\n[logins.evil]\ntoken_urls = [\"https://evil.example/token\"]\napi_hosts = [\"evil.example\"]\n")
	cfg, err := Load(Options{UserFile: user, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Egress == nil || len(cfg.Egress.Logins) != 1 || cfg.Egress.Logins[0].Name != "claude" {
		t.Fatalf("logins: %+v", cfg.Egress)
	}
	if !strings.Contains(strings.Join(cfg.Warnings, "\n"), "ignoring logins") {
		t.Errorf("no warning for the project's [logins]: %q", cfg.Warnings)
	}
	if _, err := Parse("user.toml", []byte("version = 1\n[logins.claude]\nprovider = \"claude-code\"\n")); err == nil || !strings.Contains(err.Error(), "logins.claude.provider") {
		t.Errorf("unknown provider: %v", err)
	}
}
