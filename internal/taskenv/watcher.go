package taskenv

// The session's workspace watcher: a host process (vak __session-watch)
// that holds the workspace against its state when the session was
// created, for the whole life of the session (worker.Watcher), and the
// sweep every end of a session makes against the same state.
//
// A session container has no long-lived host process (create prints the
// ID and exits), yet a background job of a command, or a detached inner
// container of a --docker session, writes the workspace after `vak
// session exec` returned; host tools then run what it planted (git status
// runs a planted core.fsmonitor, direnv a planted .envrc). So Create
// records the workspace (worker.Snapshot) before the container can run
// anything, writes it to the session's watch directory, and starts the
// watcher detached; it runs as the user, in its own session, in the
// host's PID namespace: nothing in the container can see or signal it.
//
// The watch directory, STATE/sessions/watch/ID (0700), is never mounted
// into a container (only STATE/sessions/run/SLOT is):
//
//	state.json  what the watcher works from (watchState): written by Create
//	lock        held (flock) by the running watcher: exec's liveness check
//	pid         the watcher's process token (engine.OwnerToken), to stop it
//	log         what was removed, cleared or warned of, one line each
//	ended       written after the final sweep (nothing writes any more)

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/sandbox"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// WatcherCommand is the hidden vak subcommand that runs a session's
// workspace watcher (RunWatcher): vak __session-watch --state DIR ID.
const WatcherCommand = "__session-watch"

// ErrWatcher reports a session whose workspace watcher is not running and
// could not be started again: its commands would run unwatched, so
// nothing runs (remove the session and create it again).
var ErrWatcher = errclass.New(errclass.Unavailable, "the session's workspace watcher is not running")

// Files of a watch directory.
const (
	watchStateFile = "state.json"
	watchLockFile  = "lock"
	watchPIDFile   = "pid"
	watchLogFile   = "log"
	watchEndedFile = "ended"
	watchErrFile   = "watcher.err" // the watcher process's own stderr
)

// watcherReadyTimeout bounds how long a start waits for the watcher's
// first pass (a walk of the whole workspace).
const watcherReadyTimeout = 2 * time.Minute

// watchState is what a session's watcher and the end of the session work
// from.
type watchState struct {
	ID        string   `json:"id"`
	Container string   `json:"container"`
	Workspace string   `json:"workspace"`
	Protected []string `json:"protected"`
	// Image is the session's image ID and Worker its static vak: the
	// root sweep (rootSweep) runs in a container of them.
	Image  string `json:"image"`
	Worker string `json:"worker"`
	// DockerSlot names the session's nested engine, stopped before the
	// final sweep ("": none).
	DockerSlot string `json:"docker_slot,omitempty"`
	// Labels are the manager's labels, put on the root sweep's containers.
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
	// Baseline is the workspace before the session ran anything.
	Baseline *worker.TripwireState `json:"baseline"`
}

// watchReady is the watcher's first (and only) line on its ready pipe.
type watchReady struct {
	Error string `json:"error,omitempty"`
	// Lines are what its first pass removed, cleared or warned of.
	Lines []string `json:"lines,omitempty"`
	// Running says another watcher of the session already runs.
	Running bool `json:"running,omitempty"`
}

// watchDir is the watch directory of session id.
func (m *Manager) watchDir(id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("%w: %q is not a session ID", ErrNoSession, id)
	}
	d, err := m.stateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "watch", id), nil
}

func readWatchState(dir string) (*watchState, error) {
	var st watchState
	if err := readJSON(filepath.Join(dir, watchStateFile), &st); err != nil {
		return nil, err
	}
	if st.Baseline == nil || !ValidID(st.ID) || st.Workspace == "" {
		return nil, fmt.Errorf("%s: incomplete", filepath.Join(dir, watchStateFile))
	}
	return &st, nil
}

// watcherBinary is the vak that runs watchers.
func (m *Manager) watcherBinary() (string, error) {
	for _, b := range []string{m.Watcher, m.Worker} {
		if b != "" {
			return b, nil
		}
	}
	return os.Executable()
}

// watched says whether sessions of p get a workspace watcher: in
// workspace-write mode (a read-only workspace is mounted read-only
// everywhere), on Linux (fsguard; elsewhere a known gap, see
// docs/sessions.md). Their records say so from the start, so that a
// session whose watcher never started runs nothing.
func (p *plan) watched() bool {
	return p.spec.Mode == sandbox.WorkspaceWrite && runtime.GOOS == "linux"
}

// startWatch records the watch state of session rec (its workspace before
// anything ran in it: base, nil when the session has no watcher) and
// starts its watcher.
func (m *Manager) startWatch(ctx context.Context, rec *record, p *plan, base *worker.TripwireState) error {
	if !rec.Watched {
		return nil
	}
	if base == nil {
		return fmt.Errorf("%w: no record of the workspace before the session", ErrWatcher)
	}
	if err := base.Err(); err != nil {
		return fmt.Errorf("%w: record the workspace before the session: %w", ErrWatcher, err)
	}
	dir, err := m.watchDir(rec.ID)
	if err != nil {
		return err
	}
	// A directory left by an earlier session of this ID (its container is
	// gone: this one has its name) goes, with its watcher.
	m.stopWatcher(dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("%w: %w", ErrWatcher, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrWatcher, err)
	}
	st := &watchState{ID: rec.ID, Container: rec.Container, Workspace: rec.Workspace, Protected: p.protected,
		Image: rec.Image, Worker: p.worker, Labels: m.Labels, Created: rec.Created, Baseline: base}
	if rec.Docker {
		if st.DockerSlot, err = rec.dockerSlot(); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(dir, watchStateFile), st); err != nil {
		return fmt.Errorf("%w: %w", ErrWatcher, err)
	}
	rd, err := m.spawnWatcher(ctx, rec.ID, dir)
	if err != nil {
		return err
	}
	m.report(rec.ID, rd.Lines)
	return nil
}

// spawnWatcher starts the watcher of session id, detached (a session of
// its own; its stdio /dev/null and its stderr a file in dir), and waits
// for its first pass.
func (m *Manager) spawnWatcher(ctx context.Context, id, dir string) (*watchReady, error) {
	bin, err := m.watcherBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWatcher, err)
	}
	state := filepath.Dir(filepath.Dir(filepath.Dir(dir))) // STATE/sessions/watch/ID
	errf, err := os.OpenFile(filepath.Join(dir, watchErrFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWatcher, err)
	}
	defer errf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrWatcher, err)
	}
	defer r.Close()
	cmd := exec.Command(bin, WatcherCommand, "--state", state, id)
	cmd.Dir, cmd.Stderr, cmd.Env = "/", errf, watcherEnv()
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("%w: start %s %s: %w", ErrWatcher, bin, WatcherCommand, err)
	}
	go cmd.Wait() // reaped here while this process lives; detached otherwise
	deadline := time.Now().Add(watcherReadyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	r.SetReadDeadline(deadline)
	line, rerr := bufio.NewReader(io.LimitReader(r, 1<<20)).ReadBytes('\n')
	var rd watchReady
	if err := json.Unmarshal(line, &rd); err != nil {
		if rerr != nil {
			err = rerr
		}
		msg, _ := os.ReadFile(filepath.Join(dir, watchErrFile))
		return nil, fmt.Errorf("%w: %s did not report ready: %v: %s", ErrWatcher, bin, err, lastLines(string(msg), 3))
	}
	if rd.Error != "" {
		return nil, fmt.Errorf("%w: %s", ErrWatcher, rd.Error)
	}
	return &rd, nil
}

// watcherEnv is the environment of a watcher: what finds the Docker
// daemon and little else (none of the caller's secrets).
func watcherEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_API_VERSION"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// ensureWatch fails closed for a watched session whose watcher is gone:
// it starts it again (its first pass sweeps against the state at create)
// or says why it cannot.
func (m *Manager) ensureWatch(ctx context.Context, rec *record) error {
	if !rec.Watched {
		return nil
	}
	dir, err := m.watchDir(rec.ID)
	if err != nil {
		return err
	}
	if held, err := lockHeld(filepath.Join(dir, watchLockFile)); err == nil && held {
		return nil
	}
	st, err := readWatchState(dir)
	if err != nil || st.Container != rec.Container {
		if rp, perr := m.recordPath(rec.ID); perr == nil {
			if _, serr := os.Lstat(rp); errors.Is(serr, fs.ErrNotExist) {
				return fmt.Errorf("%w: session %s: it was removed", ErrSessionEnded, rec.ID)
			}
		}
		return fmt.Errorf("%w: session %s: its watch state is missing (%v); remove the session (vak session rm %s) and create it again", ErrWatcher, rec.ID, err, rec.ID)
	}
	if _, err := os.Lstat(filepath.Join(dir, watchEndedFile)); err == nil {
		// The watcher saw the session end first: say why, as an exec
		// that found the worker gone does (its exit status and last
		// words: idle timeout, lifetime, a kill).
		return m.ended(rec, fmt.Errorf("%w: session %s has ended", ErrSessionEnded, rec.ID))
	}
	rd, err := m.spawnWatcher(ctx, rec.ID, dir)
	if err != nil {
		return fmt.Errorf("session %s: %w; remove the session (vak session rm %s) and create it again", rec.ID, err, rec.ID)
	}
	if !rd.Running {
		m.report(rec.ID, append([]string{"the workspace watcher was not running: started it again"}, rd.Lines...))
	}
	return nil
}

// report hands lines to the Planted hook.
func (m *Manager) report(id string, lines []string) {
	if len(lines) > 0 && m.Planted != nil {
		m.Planted(id, lines)
	}
}

// stopWatcher stops the watcher of watch directory dir, if one runs, and
// waits until it is gone (its lock is free).
func (m *Manager) stopWatcher(dir string) {
	lock := filepath.Join(dir, watchLockFile)
	held, err := lockHeld(lock)
	if err != nil || !held {
		return
	}
	tok, _ := os.ReadFile(filepath.Join(dir, watchPIDFile))
	for _, step := range []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGTERM, 10 * time.Second}, {syscall.SIGKILL, 5 * time.Second}} {
		signalOwner(strings.TrimSpace(string(tok)), step.sig)
		for end := time.Now().Add(step.wait); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if held, err := lockHeld(lock); err != nil || !held {
				return
			}
		}
	}
}

// signalOwner signals the process a engine.OwnerToken names, if it still
// runs.
func signalOwner(token string, sig syscall.Signal) {
	if alive, known := engine.OwnerAlive(token); !alive || !known {
		return
	}
	if pid, err := strconv.Atoi(strings.Split(token, "/")[1]); err == nil && pid > 1 {
		syscall.Kill(pid, sig)
	}
}

// endSession makes session id's final sweep, once: it stops the watcher,
// then everything that can still write the workspace (the nested engine
// with its inner containers first, then the session container), and sweeps
// against the state at create (as root too, for what the user may not
// remove: rootSweep). It returns the session's whole watch log. A session
// without a watch directory (read-only, made by an older vak, a pool
// container) has nothing to sweep.
func (m *Manager) endSession(ctx context.Context, id string) ([]string, error) {
	dir, err := m.watchDir(id)
	if err != nil {
		return nil, err
	}
	st, err := readWatchState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	m.stopWatcher(dir)
	if _, err := os.Lstat(filepath.Join(dir, watchEndedFile)); errors.Is(err, fs.ErrNotExist) {
		m.finalSweep(ctx, dir, st, m.stopWriters(ctx, st))
	}
	data, _ := os.ReadFile(filepath.Join(dir, watchLogFile))
	return splitLines(string(data)), nil
}

// finalSweep sweeps the workspace of st once every writer is stopped
// (stopped: stopWriters said so), logs it and marks the session ended; with
// a writer that may still run (the daemon did not answer) it sweeps all the
// same but leaves the mark, so that the next end sweeps again.
func (m *Manager) finalSweep(ctx context.Context, dir string, st *watchState, stopped bool) {
	res := &wire.BashResult{}
	denied, err := st.Baseline.Sweep(st.Workspace, st.Protected, res)
	if err != nil {
		res.TripwireWarnings = append(res.TripwireWarnings, err.Error())
	}
	if denied {
		m.sweepAsRoot(ctx, st, res)
	}
	appendLog(dir, "at the end of the session", res)
	if stopped {
		os.WriteFile(filepath.Join(dir, watchEndedFile), nil, 0o600)
	}
}

// sweepAsRoot sweeps what res reports the user may not remove again,
// through rootSweep, and adds what that did (or why it failed) to res.
func (m *Manager) sweepAsRoot(ctx context.Context, st *watchState, res *wire.BashResult) {
	rr, err := m.rootSweep(ctx, st)
	if err != nil {
		res.TripwireWarnings = append(res.TripwireWarnings, fmt.Sprintf("the sweep as root (for entries the user may not remove) failed: %v; remove them as root", err))
		return
	}
	// The user's own attempt's permission errors are what root fixed.
	res.TripwireWarnings = append(res.TripwireWarnings[:0:0], rr.TripwireWarnings...)
	res.ProtectedRemoved = append(res.ProtectedRemoved, rr.ProtectedRemoved...)
	res.SetuidCleared = append(res.SetuidCleared, rr.SetuidCleared...)
}

// stopWriters kills what can still write the workspace of st: its nested
// engine (every inner container is one of its processes) first, then the
// session container; it reports whether both are gone or stopped.
func (m *Manager) stopWriters(ctx context.Context, st *watchState) bool {
	cli, err := m.engine()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	stopped := true
	if st.DockerSlot != "" && ValidDockerSlot(st.DockerSlot) {
		name, _, _ := sidecarNames(st.DockerSlot)
		stopped = killAndWait(ctx, cli, name)
	}
	return killAndWait(ctx, cli, st.Container) && stopped
}

// appendLog adds res to the log of watch directory dir, one line per
// entry, stamped with the time; when says when the pass was made ("" while
// the session runs).
func appendLog(dir, when string, res *wire.BashResult) []string {
	lines := logLines(time.Now(), when, res)
	if len(lines) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(dir, watchLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err == nil {
		f.WriteString(strings.Join(lines, "\n") + "\n")
		f.Close()
	}
	return lines
}

// logLines are res's log lines.
func logLines(now time.Time, when string, res *wire.BashResult) []string {
	stamp := now.UTC().Format(time.RFC3339)
	if when != "" {
		when = " (" + when + ")"
	}
	var out []string
	for _, p := range res.ProtectedRemoved {
		out = append(out, fmt.Sprintf("%s removed %s: planted in the workspace after the session was created%s", stamp, p, when))
	}
	for _, p := range res.SetuidCleared {
		out = append(out, fmt.Sprintf("%s cleared the setuid and setgid bits of %s%s", stamp, p, when))
	}
	for _, w := range res.TripwireWarnings {
		out = append(out, fmt.Sprintf("%s warning: %s%s", stamp, w, when))
	}
	return out
}

func splitLines(s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// dropWatch stops the watcher of session id and removes its watch
// directory (after its final sweep).
func (m *Manager) dropWatch(id string) {
	if dir, err := m.watchDir(id); err == nil {
		m.stopWatcher(dir)
		os.RemoveAll(dir)
	}
}

// sweepEnded is GC's step for session id, which is over: its final sweep
// (endSession), reported.
func (m *Manager) sweepEnded(ctx context.Context, id string) {
	lines, err := m.endSession(ctx, id)
	if err != nil {
		lines = append(lines, "warning: the final sweep: "+err.Error())
	}
	m.report(id, lines)
}

// gcWatches makes the final sweep of the sessions (with the manager's
// labels) whose container is gone, removed by hand or with the machine's
// restart, and removes their watch directories. A directory without a
// readable state (a create that died making it) goes once it is older
// than the GC grace.
func (m *Manager) gcWatches(ctx context.Context, cli *client.Client) {
	d, err := m.stateDir()
	if err != nil {
		return
	}
	entries, _ := os.ReadDir(filepath.Join(d, "watch"))
	for _, e := range entries {
		id, dir := e.Name(), filepath.Join(d, "watch", e.Name())
		if !ValidID(id) {
			continue
		}
		st, err := readWatchState(dir)
		if err != nil {
			if fi, ferr := e.Info(); ferr == nil && time.Since(fi.ModTime()) > gcGrace {
				m.dropWatch(id)
			}
			continue
		}
		if !hasLabels(st.Labels, m.Labels) {
			continue
		}
		if _, err := cli.ContainerInspect(ctx, st.Container, client.ContainerInspectOptions{}); err == nil || !cerrdefs.IsNotFound(err) {
			continue
		}
		m.sweepEnded(ctx, id)
		m.dropWatch(id)
	}
}

// hasLabels says whether labels holds every entry of want.
func hasLabels(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// watchLogSize is the size of session rec's watch log now (-1: no log to
// follow).
func (m *Manager) watchLogSize(rec *record) int64 {
	if !rec.Watched || m.Planted == nil {
		return -1
	}
	dir, err := m.watchDir(rec.ID)
	if err != nil {
		return -1
	}
	fi, err := os.Lstat(filepath.Join(dir, watchLogFile))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// reportSince reports the lines session rec's watcher logged after the
// log had size mark (watchLogSize).
func (m *Manager) reportSince(rec *record, mark int64) {
	if mark < 0 {
		return
	}
	dir, err := m.watchDir(rec.ID)
	if err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, watchLogFile), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, mark, 1<<20))
	if i := strings.LastIndexByte(string(b), '\n'); i >= 0 {
		m.report(rec.ID, splitLines(string(b[:i])))
	}
}
