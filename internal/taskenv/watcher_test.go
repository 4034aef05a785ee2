package taskenv

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// The watcher's lock is what exec checks: free without a watcher (no file
// yet, or a file nobody holds), held while one holds it, and a second
// holder is refused (two watchers never run for one session).
func TestWatchLock(t *testing.T) {
	lock := filepath.Join(t.TempDir(), watchLockFile)
	if held, err := lockHeld(lock); err != nil || held {
		t.Fatalf("no lock file: held %v %v", held, err)
	}
	f, ok, err := holdLock(lock)
	if err != nil || !ok {
		t.Fatalf("take the lock: %v %v", ok, err)
	}
	if held, err := lockHeld(lock); err != nil || !held {
		t.Fatalf("while held: held %v %v", held, err)
	}
	if g, ok, err := holdLock(lock); err != nil || ok || g != nil {
		t.Fatalf("a second holder: %v %v", ok, err)
	}
	f.Close()
	if held, err := lockHeld(lock); err != nil || held {
		t.Fatalf("after release: held %v %v", held, err)
	}
}

// A pass's log lines name what went, what was cleared and what was
// warned of, stamped, one line each (vak session rm prints them).
func TestWatchLogLines(t *testing.T) {
	res := &wire.BashResult{ProtectedRemoved: []string{".git", "sub/.git (through the link sub)"}, SetuidCleared: []string{"tool (mode was 4755)"}, TripwireWarnings: []string{"fsguard: remove \".vscode\": permission denied"}}
	lines := logLines(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), "at the end of the session", res)
	want := []string{
		"2030-01-02T03:04:05Z removed .git: planted in the workspace after the session was created (at the end of the session)",
		"2030-01-02T03:04:05Z removed sub/.git (through the link sub): planted in the workspace after the session was created (at the end of the session)",
		"2030-01-02T03:04:05Z cleared the setuid and setgid bits of tool (mode was 4755) (at the end of the session)",
		"2030-01-02T03:04:05Z warning: fsguard: remove \".vscode\": permission denied (at the end of the session)",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("lines:\n%s", strings.Join(lines, "\n"))
	}
	if got := splitLines(strings.Join(want, "\n") + "\n"); !slices.Equal(got, want) || splitLines(" \n") != nil {
		t.Fatalf("splitLines: %q", got)
	}
}

// The sweep as root runs vak's own sweep and nothing else, with only what
// removing another user's files takes: root with DAC_OVERRIDE and FOWNER
// (all else dropped), no network, no new privileges, a read-only root,
// the workspace at its own path and the worker binary read-only. A state
// without an image or binary is refused.
func TestSweeperConfig(t *testing.T) {
	st := &watchState{ID: "t-0123456789", Workspace: "/w/ws", Image: "sha256:abc", Worker: "/opt/vak", Labels: map[string]string{"vak.test": "1"}, Baseline: &worker.TripwireState{}}
	cfg, hc, err := sweeperConfig(st)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "0:0" || !slices.Equal(cfg.Entrypoint, []string{ContainerWorker, SweepCommand}) || !cfg.NetworkDisabled || cfg.Labels["vak.kind"] != KindSweep || cfg.Labels["vak.test"] != "1" || cfg.Labels[LabelSession] != st.ID {
		t.Errorf("config: %+v", cfg)
	}
	if hc.NetworkMode != "none" || !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(hc.CapAdd, []string{"DAC_OVERRIDE", "FOWNER"}) || !hc.ReadonlyRootfs || hc.Privileged || !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("host config: %+v", hc)
	}
	if len(hc.Mounts) != 2 || hc.Mounts[0].Source != st.Workspace || hc.Mounts[0].Target != st.Workspace || hc.Mounts[0].ReadOnly || hc.Mounts[1].Source != st.Worker || hc.Mounts[1].Target != ContainerWorker || !hc.Mounts[1].ReadOnly {
		t.Errorf("mounts: %+v", hc.Mounts)
	}
	st.Image = ""
	if _, _, err := sweeperConfig(st); err == nil {
		t.Error("a state without an image was accepted")
	}
}
