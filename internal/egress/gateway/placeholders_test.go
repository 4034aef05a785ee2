package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/egress/egressconfig"
)

// A gateway restarted with the same state keeps its placeholders (the
// sandboxes that joined before hold them); another state gets new ones.
func TestPlaceholdersSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.toml")
	os.WriteFile(cfgPath, []byte("[[network.rules]]\nhosts = [\"ok.test\"]\n[secrets.TOKEN]\nvalue = \"real-value-123456\"\nhosts = [\"ok.test\"]\n"), 0o600)
	start := func(state string) string {
		t.Helper()
		g, err := New(Options{Load: func() (*egressconfig.Config, error) { return egressconfig.LoadFile(cfgPath) }, StateDir: state,
			Listen: "-", AdminSocket: "-"})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		ph := g.Env()["TOKEN"]
		if !strings.HasPrefix(ph, "vakph_") {
			t.Fatalf("placeholder %q", ph)
		}
		return ph
	}
	state := filepath.Join(dir, "s")
	first := start(state)
	if again := start(state); again != first {
		t.Fatalf("restart with the same state: %s, want %s", again, first)
	}
	if other := start(filepath.Join(dir, "other")); other == first {
		t.Fatal("another state got the same placeholder")
	}
	data, _ := os.ReadFile(filepath.Join(state, placeholdersFile))
	if strings.Contains(string(data), "real-value") {
		t.Fatal("the placeholders file holds the secret value")
	}
}
