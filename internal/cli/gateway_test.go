package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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

func TestGatewayNegativeProcsIsAUsageError(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	code, _, stderr := vakMain(t, "", "gateway", "--procs", "-1", "--listen", "127.0.0.1:0", "--socket", "-")
	if code != ExitUsage || !strings.Contains(stderr, "--procs -1") {
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
	dir := t.TempDir()
	keyDir := filepath.Join(dir, "key")
	key, err := receipts.LoadOrCreateKey(keyDir)
	if err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(keyDir, receipts.PubKeyFile)
	path := filepath.Join(dir, "r.jsonl")
	l, err := receipts.OpenSigned(path, key)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		l.Append(receipts.Record{Protocol: "https", Host: "a.test", Rule: 0, Decision: receipts.Allow})
	}
	l.Close()
	if code, out, _ := vakMain(t, "", "receipts", "verify", "--key", pub, path); code != 0 || !strings.Contains(out, "OK, 5 record(s)") || !strings.Contains(out, "every record signed") {
		t.Fatalf("intact: %d %s", code, out)
	}
	// A record appended without the key (chain continued correctly).
	b, _ := os.ReadFile(path)
	ls := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	sum := sha256.Sum256([]byte(ls[len(ls)-1]))
	forged := fmt.Sprintf(`{"seq":5,"time":"2026-01-01T00:00:00Z","protocol":"https","host":"x.test","rule":0,"decision":"allow","bytes_out":0,"bytes_in":0,"prev":"%s"}`, hex.EncodeToString(sum[:]))
	os.WriteFile(path, append(b, forged+"\n"...), 0o600)
	if code, out, _ := vakMain(t, "", "receipts", "verify", "--key", pub, path); code != ExitFailure || !strings.Contains(out, ":6: records 5 to 5 are not covered") {
		t.Fatalf("appended: %d %s", code, out)
	}
	os.WriteFile(path, b, 0o600)
	os.WriteFile(path, []byte(strings.Replace(string(b), `"decision":"allow"`, `"decision":"deny"`, 1)), 0o600)
	if code, out, _ := vakMain(t, "", "receipts", "verify", "--key", pub, path); code != ExitFailure || !strings.Contains(out, ":2: prev hash does not match") {
		t.Fatalf("tampered: %d %s", code, out)
	}
	// An unsigned log (written before signing): only with --allow-unsigned.
	old := filepath.Join(dir, "old.jsonl")
	l, err = receipts.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(receipts.Record{Protocol: "dns", Rule: -1, Decision: receipts.Deny})
	l.Close()
	if code, out, _ := vakMain(t, "", "receipts", "verify", "--key", pub, old); code != ExitFailure || !strings.Contains(out, "no signature file") {
		t.Fatalf("unsigned: %d %s", code, out)
	}
	if code, out, _ := vakMain(t, "", "receipts", "verify", "--key", pub, "--allow-unsigned", old); code != 0 || !strings.Contains(out, "signatures not checked") {
		t.Fatalf("unsigned allowed: %d %s", code, out)
	}
	// No key at all: a clear error naming the flags.
	if code, _, stderr := vakMain(t, "", "receipts", "verify", "--key", filepath.Join(dir, "missing.pub"), path); code != ExitFailure || !strings.Contains(stderr, "--allow-unsigned") {
		t.Fatalf("no key: %d %s", code, stderr)
	}
}

func TestGatewayPresets(t *testing.T) {
	code, out, errs := vakMain(t, "", "gateway", "presets")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, name := range []string{"anthropic", "openai", "github", "npm", "pypi", "go-modules", "debian", "vscode"} {
		if !strings.Contains(out, "\n"+name+"\t") && !strings.HasPrefix(out, name+"\t") {
			t.Errorf("preset %s not listed:\n%s", name, out)
		}
	}
	code, out, _ = vakMain(t, "", "gateway", "presets", "openai")
	if code != 0 || !strings.Contains(out, `hosts = ["api.openai.com"]`) || !strings.Contains(out, "version = 1") {
		t.Errorf("presets openai: exit %d\n%s", code, out)
	}
	code, _, errs = vakMain(t, "", "gateway", "presets", "nope")
	if code != ExitUsage || !strings.Contains(errs, `unknown preset "nope"`) {
		t.Errorf("unknown preset: exit %d %q", code, errs)
	}
	// A user config that names presets loads (they are trusted config, like
	// the rules); an unknown name is a config error naming the key.
	cfg := writeConfig(t, "version = 1\n[network]\npolicy = \"proxied\"\npresets = [\"npm\", \"nope\"]\n")
	code, _, errs = vakMain(t, cfg, "run", "--", "true")
	if code != ExitConfig || !strings.Contains(errs, "network.presets[1]") || !strings.Contains(errs, `"nope"`) {
		t.Errorf("bad preset in config: exit %d %q", code, errs)
	}
}
