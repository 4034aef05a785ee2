package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// sessionWatchDir is the watch directory of session id in the test's
// state dir (sessionEnv).
func sessionWatchDir(id string) string {
	return filepath.Join(os.Getenv("XDG_STATE_HOME"), "vak", "sessions", "watch", id)
}

// watcherRuns reports whether session id's workspace watcher holds its lock.
func watcherRuns(t *testing.T, id string) bool {
	t.Helper()
	fd, err := unix.Open(filepath.Join(sessionWatchDir(id), "lock"), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true
	}
	return false
}

// killWatcher kills session id's workspace watcher (a process vak started
// for this test's session) and waits until it is gone.
func killWatcher(t *testing.T, id string) {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(sessionWatchDir(id), "pid"))
	f := strings.Split(strings.TrimSpace(string(tok)), "/")
	if err != nil || len(f) != 3 {
		t.Fatalf("the watcher's pid file: %q %v", tok, err)
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 1 || !watcherRuns(t, id) {
		t.Fatalf("control: no running watcher (pid %q): %v", f[1], err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the watcher to die", func() bool { return !watcherRuns(t, id) })
}

// The attack of issue 27: a background job of `vak session exec` outlives
// the command and, two seconds later, plants a repository whose config
// sets core.fsmonitor, which host `git status` runs. The session's
// workspace watcher removes the plant while the session still runs: host
// git status does not run the fsmonitor, the watch log names what went,
// and `vak session rm` reports it; what the job wrote besides the plant
// survives (it ran to its end). Control: the same plant made outside any
// session makes host git status run the fsmonitor.
func TestSessionWatcherBackgroundPlant(t *testing.T) {
	cfg, labels := sessionEnv(t)
	ws := tempWorkspace(t)
	canary := filepath.Join(t.TempDir(), "FSM-RAN")
	plant := fmt.Sprintf(`mkdir -p .git/hooks .git/objects .git/refs; echo "ref: refs/heads/main" > .git/HEAD; printf "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch %s\n" > .git/config; printf "#!/bin/sh\necho pwn\n" > .git/hooks/pre-commit`, canary)

	ctl := t.TempDir()
	if out, err := runShell(ctl, plant); err != nil {
		t.Fatalf("control plant: %v %s", err, out)
	}
	if !gitStatusRunsFSMonitor(t, ctl, canary) {
		t.Fatal("control: host git status did not run the planted fsmonitor")
	}

	id := createSession(t, cfg, labels, ws, "plant")
	if code, _, errs := session(t, cfg, labels, "", "exec", id, "--", "sh", "-c", "(sleep 2; "+plant+"; echo ok > bg-done) >/dev/null 2>&1 &"); code != 0 {
		t.Fatalf("exec: %d %s", code, errs)
	}
	waitUntil(t, "the background job's own file", func() bool { return !absent(ws, "bg-done") })
	logf := filepath.Join(sessionWatchDir(id), "log")
	waitUntil(t, "the watcher to remove and log the plant", func() bool {
		b, _ := os.ReadFile(logf)
		return absent(ws, ".git") && strings.Contains(string(b), "removed .git")
	})
	if !watcherRuns(t, id) {
		t.Fatal("the watcher is not running: the session is not live")
	}
	if gitStatusRunsFSMonitor(t, ws, canary) {
		t.Fatal("host git status ran the fsmonitor planted in the session's workspace")
	}
	if code, _, errs := session(t, cfg, labels, "", "exec", id, "--", "true"); code != 0 {
		t.Fatalf("exec after the plant: %d %s", code, errs)
	}
	code, _, errs := session(t, cfg, labels, "", "rm", id)
	if code != 0 || !strings.Contains(errs, "removed .git") {
		t.Fatalf("rm did not report the plant: %d %s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "bg-done")); err != nil || string(b) != "ok\n" {
		t.Errorf("the background job's ordinary file: %q %v", b, err)
	}
	if !absent(sessionWatchDir(id), "") {
		t.Errorf("rm left the watch directory %s", sessionWatchDir(id))
	}
}

// A session's watcher that is gone (killed) is started again by the next
// exec, whose first pass sweeps against the workspace at create (a plant
// made while nothing watched goes, and exec says so); every end of a
// session sweeps once nothing can write any more: vak session rm (with
// the watcher dead, rm's own sweep), vak gc of a session whose --hold
// owner was killed (the watcher outlives its owner), and the idle timeout
// (the watcher sweeps when the container stops, and nothing the user makes
// after that is swept by a later gc). A .git link is removed as the link;
// the directory it points to keeps its file.
func TestSessionWatcherEnds(t *testing.T) {
	cfg, labels := sessionEnv(t)
	t.Run("ExecRestarts", func(t *testing.T) {
		ws := tempWorkspace(t)
		id := createSession(t, cfg, labels, ws, "restart")
		killWatcher(t, id)
		os.WriteFile(filepath.Join(ws, ".envrc"), []byte("echo planted\n"), 0o644)
		code, _, errs := session(t, cfg, labels, "", "exec", id, "--", "true")
		if code != 0 || !strings.Contains(errs, "started it again") || !strings.Contains(errs, "removed .envrc") {
			t.Fatalf("exec with the watcher dead: %d %s", code, errs)
		}
		if !absent(ws, ".envrc") || !watcherRuns(t, id) {
			t.Fatalf("after the restart: .envrc absent %v, watcher runs %v", absent(ws, ".envrc"), watcherRuns(t, id))
		}
	})
	t.Run("Remove", func(t *testing.T) {
		ws := tempWorkspace(t)
		target := t.TempDir()
		os.WriteFile(filepath.Join(target, "control"), []byte("keep\n"), 0o644)
		id := createSession(t, cfg, labels, ws, "rm")
		killWatcher(t, id)
		os.MkdirAll(filepath.Join(ws, ".vscode"), 0o755)
		os.WriteFile(filepath.Join(ws, ".vscode", "tasks.json"), []byte("{}\n"), 0o644)
		os.MkdirAll(filepath.Join(ws, "lk"), 0o755)
		os.Symlink(target, filepath.Join(ws, "lk", ".git"))
		code, _, errs := session(t, cfg, labels, "", "rm", id)
		if code != 0 || !strings.Contains(errs, "removed .vscode") || !strings.Contains(errs, "removed lk/.git") {
			t.Fatalf("rm: %d %s", code, errs)
		}
		if !absent(ws, ".vscode") || !absent(ws, "lk/.git") || absent(ws, "lk") {
			t.Errorf("after rm: .vscode absent %v, lk/.git absent %v, lk absent %v", absent(ws, ".vscode"), absent(ws, "lk/.git"), absent(ws, "lk"))
		}
		if b, err := os.ReadFile(filepath.Join(target, "control")); err != nil || string(b) != "keep\n" {
			t.Errorf("the link's target lost its file: %q %v", b, err)
		}
	})
	t.Run("GCOwnerGone", func(t *testing.T) { sessionWatcherOwnerGone(t, cfg, labels) })
	t.Run("IdleTimeout", func(t *testing.T) {
		idleCfg := filepath.Join(t.TempDir(), "config.toml")
		b, _ := os.ReadFile(cfg)
		os.WriteFile(idleCfg, append(b, "[session]\nidle_timeout = \"3s\"\n"...), 0o600)
		ws := tempWorkspace(t)
		id := createSession(t, idleCfg, labels, ws, "idle")
		if code, _, errs := session(t, idleCfg, labels, "", "exec", id, "--", "sh", "-c", "(while :; do echo x > .tool-versions; sleep 0.1; done) >/dev/null 2>&1 &"); code != 0 {
			t.Fatalf("exec: %d %s", code, errs)
		}
		waitUntil(t, "the idle session's watcher to end", func() bool { return !watcherRuns(t, id) })
		if absent(sessionWatchDir(id), "ended") || !absent(ws, ".tool-versions") {
			t.Fatalf("after the idle timeout: ended marker %v, .tool-versions absent %v", !absent(sessionWatchDir(id), "ended"), absent(ws, ".tool-versions"))
		}
		// Made by the user after the session ended: not the session's.
		os.WriteFile(filepath.Join(ws, ".tool-versions"), []byte("go 1.26\n"), 0o644)
		var out, errb bytes.Buffer
		if code := Main(context.Background(), append([]string{"--config", idleCfg, "gc"}, labels...), Stdio{Out: &out, Err: &errb}); code != 0 || !strings.Contains(out.String(), "removed "+id) {
			t.Fatalf("gc: %d %s %s", code, out.String(), errb.String())
		}
		if absent(ws, ".tool-versions") {
			t.Error("gc swept a file the user made after the session ended")
		}
	})
}

// sessionWatcherOwnerGone: a --hold owner killed with SIGKILL leaves its
// session and its watcher, which keeps removing what a background job
// plants; vak gc ends the session (its owner is gone) with a final sweep
// after the container is stopped.
func sessionWatcherOwnerGone(t *testing.T, cfg string, labels []string) {
	ws := tempWorkspace(t)
	cmd, id := holdSession(t, cfg, labels, "-w", ws, "--task", "owner")
	t.Cleanup(func() { session(t, cfg, labels, "", "rm", id) })
	if code, _, errs := session(t, cfg, labels, "", "exec", id, "--", "sh", "-c", "(while :; do echo x > .mise.toml; sleep 0.1; done) >/dev/null 2>&1 &"); code != 0 {
		t.Fatalf("exec: %d %s", code, errs)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	logf := filepath.Join(sessionWatchDir(id), "log")
	waitUntil(t, "the watcher to remove the plant after its owner died", func() bool {
		b, _ := os.ReadFile(logf)
		return strings.Count(string(b), "removed .mise.toml") >= 2
	})
	if !watcherRuns(t, id) {
		t.Fatal("the watcher died with the session's owner")
	}
	var out, gerr bytes.Buffer
	if code := Main(context.Background(), append([]string{"--config", cfg, "gc"}, labels...), Stdio{Out: &out, Err: &gerr}); code != 0 || !strings.Contains(out.String(), "removed "+id+": its owner process is gone") {
		t.Fatalf("gc: %d %s %s", code, out.String(), gerr.String())
	}
	if !strings.Contains(gerr.String(), "removed .mise.toml") {
		t.Errorf("gc did not report what the watcher removed: %s", gerr.String())
	}
	if !absent(ws, ".mise.toml") || watcherRuns(t, id) || !absent(sessionWatchDir(id), "") {
		t.Errorf("after gc: .mise.toml absent %v, watcher runs %v, watch dir absent %v", absent(ws, ".mise.toml"), watcherRuns(t, id), absent(sessionWatchDir(id), ""))
	}
}
