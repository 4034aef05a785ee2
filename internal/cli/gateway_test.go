package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/receipts"
)

func TestGatewayConfigErrorsExit78(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, []byte("version = 1\n\n[[network.rules]]\nhosts = [\"ok.test\"]\n\n[[network.rules]]\nhosts = [\"a*b.test\"]\n"), 0o600)
	code, _, stderr := vakMain(t, cfg, "gateway", "--listen", "127.0.0.1:0", "--socket", "-")
	if code != ExitConfig || !strings.Contains(stderr, "network.rules[1].hosts[0]") || !strings.Contains(stderr, cfg) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestImportSandcatCommand(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "settings.json")
	os.WriteFile(in, []byte(`{"secrets":{"TOKEN":{"value":"a-long-secret-value","hosts":["api.example.com"]}},"network":[{"action":"allow","host":"*.example.com","method":"GET"}]}`), 0o600)
	out := filepath.Join(dir, "vak.toml")
	code, _, stderr := vakMain(t, "", "gateway", "import-sandcat", in, "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("output %v %v", fi, err)
	}
	b, _ := os.ReadFile(out)
	if !strings.Contains(string(b), `hosts = ["*.example.com"]`) || !strings.Contains(stderr, "headers only") {
		t.Fatalf("output:\n%s\nstderr:\n%s", b, stderr)
	}
	// A deny rule that cannot be expressed fails.
	os.WriteFile(in, []byte(`{"network":[{"action":"deny","host":"*evil*"}]}`), 0o600)
	if code, _, _ := vakMain(t, "", "gateway", "import-sandcat", in); code != ExitFailure {
		t.Fatalf("unconvertible deny: exit %d", code)
	}
}

func TestReceiptsVerifyCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	l, err := receipts.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		l.Append(receipts.Record{Protocol: "https", Host: "a.test", Rule: 0, Decision: receipts.Allow})
	}
	l.Close()
	if code, out, _ := vakMain(t, "", "receipts", "verify", path); code != 0 || !strings.Contains(out, "OK, 5 record(s)") {
		t.Fatalf("intact: %d %s", code, out)
	}
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), `"decision":"allow"`, `"decision":"deny"`, 1)), 0o600)
	if code, out, _ := vakMain(t, "", "receipts", "verify", path); code != ExitFailure || !strings.Contains(out, ":2:") {
		t.Fatalf("tampered: %d %s", code, out)
	}
}
