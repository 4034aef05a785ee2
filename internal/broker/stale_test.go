package broker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestCleanStale(t *testing.T) {
	// A pid that is certainly gone: a child we started and reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	stale, err := os.MkdirTemp("", TempPrefix+strconv.Itoa(dead)+"-")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(stale, "leftover"), []byte("x"), 0o600)
	live, err := os.MkdirTemp("", TempPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	other, err := os.MkdirTemp("", "vak-tmp-notapid-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(other)

	removed := CleanStale()
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("stale dir of dead broker %d kept (removed %v)", dead, removed)
	}
	for _, keep := range []string{live, other} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed", keep)
		}
	}
}
