package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"vak/internal/testenv"
)

// A `vak run --backend docker` killed with SIGKILL (no cleanup runs in it)
// does not leave its command running: the container's init sees its
// lifeline end and kills the command, and the container removes itself.
// Control: the container was running before the kill.
func TestRunSIGKILLLeavesNoContainer(t *testing.T) {
	cfg := dockerConfig(t)
	ws := tempWorkspace(t)
	cmd := exec.Command(testenv.Vak(t), "--config", cfg, "run", "-w", ws, "--", "sh", "-c", "touch started; sleep 300")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("container never started: %s", errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l := leftovers(t, ws); l == "" {
		t.Fatal("no running container found, so the test proves nothing")
	}
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	deadline = time.Now().Add(60 * time.Second)
	for leftovers(t, ws) != "" {
		if time.Now().After(deadline) {
			exec.Command("docker", "rm", "-f", leftovers(t, ws)).Run()
			t.Fatalf("the container outlived its killed vak run by a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
