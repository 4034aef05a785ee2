package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"vak/internal/keeper"
	"vak/internal/testenv"
)

var (
	keeperStarted  = regexp.MustCompile(`workspace keeper started for the next runs \(pid (\d+)\)`)
	keeperAnswered = regexp.MustCompile(`workspace keeper \(([^)]*)\): answered by pid (\d+)`)
	keeperSwept    = regexp.MustCompile(`workspace sweep \(keeper: answered by pid (\d+)\)`)
)

// A cold `vak run` in a workspace of keeper.MinDirs directories or more
// starts a keeper for the next runs, which then take the workspace's .git
// entries and what changed from it instead of a stat per directory, and
// every protected-path guarantee holds through it:
//
//   - the agent plants a nested repository in a new directory and puts
//     the parent's times back: the sweep, answered by the keeper, removes
//     it (the control: the command's own file stays);
//   - the agent can neither kill the keeper nor see its socket;
//   - a read-only run takes its plan from the keeper;
//   - the keeper dies while a command runs (after the plant): the sweep
//     falls back to the ledger and still removes the plant, and the run
//     starts a new keeper.
func TestRunKeeper(t *testing.T) {
	testenv.RequireLandlock(t)
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"landlock\"\n")
	ws := tempWorkspace(t)
	state := t.TempDir()
	for i := 0; i <= keeper.MinDirs; i++ {
		if err := os.MkdirAll(filepath.Join(ws, fmt.Sprintf("d%02d/e%03d", i%40, i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := tracedRun(t, cfg, ws, state)
	started := func(trace string) int {
		t.Helper()
		m := keeperStarted.FindStringSubmatch(trace)
		if m == nil {
			t.Fatalf("no keeper started:\n%s", trace)
		}
		pid, _ := strconv.Atoi(m[1])
		// The keeper is this test's (its vak started it): stop it at the end.
		t.Cleanup(func() { stopKeeper(t, pid) })
		waitFor(t, "the keeper to listen", func() bool {
			socks, _ := filepath.Glob(filepath.Join(state, "vak", "keepers", "*.sock"))
			return len(socks) == 1
		})
		return pid
	}
	answered := func(trace string, pid int, what string) {
		t.Helper()
		m := keeperAnswered.FindStringSubmatch(trace)
		if m == nil || m[2] != strconv.Itoa(pid) || !strings.HasPrefix(m[1], what) {
			t.Fatalf("want the %s from keeper %d:\n%s", what, pid, trace)
		}
	}

	_, trace := run("true")
	pid := started(trace)
	doctor := exec.Command(testenv.Vak(t), "--config", cfg, "doctor", "-w", ws)
	doctor.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
	if out, _ := doctor.CombinedOutput(); !strings.Contains(string(out), fmt.Sprintf("vak __keep-watch: pid %d runs for this workspace", pid)) {
		t.Fatalf("vak doctor does not name keeper %d:\n%s", pid, out)
	}

	st, err := os.Stat(filepath.Join(ws, "d01"))
	if err != nil {
		t.Fatal(err)
	}
	socks, _ := filepath.Glob(filepath.Join(state, "vak", "keepers", "*"))
	out, trace := run(fmt.Sprintf(`mkdir -p d01/new/.git/hooks && printf '#!/bin/sh\necho pwned\n' > d01/new/.git/hooks/post-checkout && touch d01/made && touch -d @%d d01; kill -9 %d 2>/dev/null && echo KILLED; ls %q >/dev/null 2>&1 && echo LISTED; echo done`, st.ModTime().Unix(), pid, filepath.Dir(socks[0])))
	answered(trace, pid, "mount plan and baseline")
	if m := keeperSwept.FindStringSubmatch(trace); m == nil || m[1] != strconv.Itoa(pid) {
		t.Fatalf("the sweep was not the keeper's:\n%s", trace)
	}
	if _, err := os.Lstat(filepath.Join(ws, "d01", "new", ".git")); err == nil {
		t.Fatal("the nested repository planted behind restored times survived the keeper's sweep")
	}
	if _, err := os.Stat(filepath.Join(ws, "d01", "made")); err != nil {
		t.Fatalf("control: the command's own file is gone: %v", err)
	}
	if strings.Contains(out, "KILLED") || strings.Contains(out, "LISTED") || !strings.Contains(out, "done") {
		t.Fatalf("the sandbox reached the keeper: %q", out)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("control: the keeper is gone after the run: %v", err)
	}

	_, trace = run(`ls d02 >/dev/null`, "--mode", "read-only")
	answered(trace, pid, "mount plan,")

	// The keeper dies while the command runs, after its plant: the sweep
	// falls back to the ledger.
	done := make(chan string, 1)
	go func() {
		_, trace := run(`mkdir -p d03/late/.git && touch d03/late/kept && while [ ! -e go ]; do sleep 0.05; done; rm go`)
		done <- trace
	}()
	waitFor(t, "the plant", func() bool { _, err := os.Stat(filepath.Join(ws, "d03", "late", "kept")); return err == nil })
	stopKeeper(t, pid)
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	trace = <-done
	answered(trace, pid, "mount plan and baseline")
	if !strings.Contains(trace, "workspace sweep (ledger: ") {
		t.Fatalf("the sweep without its keeper did not use the ledger:\n%s", trace)
	}
	if _, err := os.Lstat(filepath.Join(ws, "d03", "late", ".git")); err == nil {
		t.Fatal("the plant survived the sweep after the keeper died")
	}
	if _, err := os.Stat(filepath.Join(ws, "d03", "late", "kept")); err != nil {
		t.Fatalf("control: the command's own file is gone: %v", err)
	}
	if p := started(trace); p == pid {
		t.Fatalf("the new keeper has the old one's pid %d", p)
	}
}

// stopKeeper stops a keeper this test's vak started and waits until it is
// gone (it is not this process's child: poll).
func stopKeeper(t *testing.T, pid int) {
	t.Helper()
	if syscall.Kill(pid, syscall.SIGTERM) != nil {
		return
	}
	waitFor(t, fmt.Sprintf("keeper %d to leave", pid), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return err != nil || !bytes.Contains(b, []byte(keeper.Command))
	})
}
