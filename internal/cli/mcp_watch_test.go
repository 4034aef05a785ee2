package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/testenv"
)

// `vak mcp` on the landlock backend holds its workspace continuously: a
// background job of one bash call plants a repository whose config sets
// core.fsmonitor, and .vscode, after the call returned; the server's
// workspace watcher removes both before the next call, and logs each
// (stderr, the server's log: the plants were made, the attempt happened).
// Host git status then runs no fsmonitor. What the job writes besides the
// plants survives. Control: the same plant made outside the sandbox makes
// host git status run the fsmonitor.
func TestMCPWatcherRemovesBackgroundPlants(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	canary := filepath.Join(t.TempDir(), "FSM-RAN")
	plant := `mkdir -p .git/hooks .git/objects .git/refs; echo "ref: refs/heads/main" > .git/HEAD; printf "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch ` + canary + `\n" > .git/config; mkdir -p .vscode; echo '{}' > .vscode/tasks.json`
	ctl := t.TempDir()
	if out, err := runShell(ctl, plant); err != nil {
		t.Fatalf("control plant: %v %s", err, out)
	}
	if !gitStatusRunsFSMonitor(t, ctl, canary) {
		t.Fatal("control: host git status did not run the planted fsmonitor")
	}

	cfg := writeConfig(t, "version = 1\n")
	cs, stderr := mcpClient(t, "--config", cfg, "mcp", "--workspace", ws, "--backend", "landlock")
	defer cs.Close()
	if c, _ := bashOut(t, cs, "(sleep 1; "+plant+"; echo ok > bg-done) >/dev/null 2>&1 & echo started"); c != 0 {
		t.Fatalf("first call: %s", stderr.String())
	}
	waitUntil(t, "the background job's own file", func() bool { return !absent(ws, "bg-done") })
	waitUntil(t, "the plants to be removed before the next call", func() bool {
		return absent(ws, ".git") && absent(ws, ".vscode") && strings.Contains(stderr.String(), "path=.git") && strings.Contains(stderr.String(), "path=.vscode")
	})
	if !strings.Contains(stderr.String(), "planted in the workspace while the session ran") {
		t.Errorf("the server's log does not say why:\n%s", stderr.String())
	}
	if gitStatusRunsFSMonitor(t, ws, canary) {
		t.Fatal("host git status ran the fsmonitor a background job planted")
	}
	if c, got := bashOut(t, cs, "cat bg-done; ls -A"); c != 0 || !strings.HasPrefix(got, "ok\n") || strings.Contains(got, ".git") {
		t.Fatalf("second call: %d %q", c, got)
	}
}

// absent reports whether rel does not exist in ws (not following a link).
func absent(ws, rel string) bool {
	_, err := os.Lstat(filepath.Join(ws, rel))
	return err != nil
}

// runShell runs script with sh in dir.
func runShell(dir, script string) ([]byte, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// gitStatusRunsFSMonitor runs host git status in dir (no repository above
// it is looked at) and reports whether canary appeared, removing it.
func gitStatusRunsFSMonitor(t *testing.T, dir, canary string) bool {
	t.Helper()
	cmd := exec.Command("git", "status")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir), "HOME="+t.TempDir())
	out, _ := cmd.CombinedOutput()
	t.Logf("git status in %s: %s", dir, bytes.TrimSpace(out))
	_, err := os.Stat(canary)
	os.Remove(canary)
	return err == nil
}
