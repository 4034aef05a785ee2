package taskenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/errclass"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// RunWatcher is session id's workspace watcher (vak __session-watch; see
// watcher.go). It takes the watch directory's lock (another watcher of
// the session holding it: it says so on ready and returns), sweeps
// against the state at create (what was planted while no watcher ran),
// reports on ready, and then passes whenever the kernel reports a change
// in the workspace (worker.Watcher), logging what each pass removed; what
// the user may not remove (an inner container's root-owned files) is swept
// again as root (rootSweep). It returns when ctx ends (SIGTERM: whoever
// stopped it makes the final sweep) or, when the session container
// stopped by itself (idle timeout, lifetime, a crash), after stopping the
// nested engine and making the final sweep itself.
func (m *Manager) RunWatcher(ctx context.Context, id string, ready io.WriteCloser) error {
	defer ready.Close()
	st, dir, lock, err := m.lockWatch(id)
	if err == nil && lock == nil {
		return writeReady(ready, watchReady{Running: true})
	}
	var w *worker.Watcher
	if err == nil {
		defer lock.Close()
		w, err = worker.NewWatcher(st.Workspace, st.Protected, st.Baseline)
	}
	if err != nil {
		writeReady(ready, watchReady{Error: err.Error()})
		return err
	}
	defer w.Close()
	var first []string
	record := func(res *wire.BashResult, denied bool) {
		if denied {
			m.sweepAsRoot(ctx, st, res)
		}
		first = appendLog(dir, "", res)
	}
	w.Pass(record)
	if err := writeReady(ready, watchReady{Lines: first}); err != nil {
		return err
	}
	ready.Close()

	runCtx, cancel := context.WithCancel(ctx)
	ended := make(chan bool, 1)
	go func() {
		ended <- m.waitEnded(runCtx, st.Container)
		cancel()
	}()
	w.Run(runCtx, record)
	cancel()
	if !<-ended || ctx.Err() != nil {
		return nil // stopped: whoever stopped it sweeps
	}
	m.finalSweep(ctx, dir, st, m.stopWriters(ctx, st))
	return nil
}

// lockWatch takes the lock of session id's watch directory and records
// this process as its watcher. lock is nil (and err too) when another
// process holds it.
func (m *Manager) lockWatch(id string) (st *watchState, dir string, lock *os.File, err error) {
	if dir, err = m.watchDir(id); err != nil {
		return nil, "", nil, err
	}
	if st, err = readWatchState(dir); err != nil {
		return nil, dir, nil, fmt.Errorf("session %s: watch state: %w", id, err)
	}
	lock, ok, err := holdLock(filepath.Join(dir, watchLockFile))
	if err != nil || !ok {
		return st, dir, nil, err
	}
	if _, err := os.Lstat(filepath.Join(dir, watchEndedFile)); err == nil {
		lock.Close()
		return nil, dir, nil, fmt.Errorf("%w: session %s has ended", ErrSessionEnded, id)
	}
	tok, err := engine.OwnerToken(os.Getpid())
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, watchPIDFile), []byte(tok+"\n"), 0o600)
	}
	if err != nil {
		lock.Close()
		return nil, dir, nil, fmt.Errorf("session %s: watcher identity: %w", id, err)
	}
	return st, dir, lock, nil
}

func writeReady(w io.Writer, r watchReady) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// waitEnded waits until container cid is not running (or gone) and says
// so, or until ctx ends (false). A daemon that goes away in between (a
// restart) is asked again every few seconds.
func (m *Manager) waitEnded(ctx context.Context, cid string) bool {
	for ctx.Err() == nil {
		cli, err := m.engine()
		if err != nil {
			return false // no daemon client at all: nothing to wait with
		}
		w := cli.ContainerWait(ctx, cid, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case <-w.Result:
			return true
		case err := <-w.Error:
			if cerrdefs.IsNotFound(err) {
				return true
			}
		}
		t := time.NewTimer(2 * time.Second)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return false
}

// ErrWatcherUsage is returned by WatcherMain without a state dir or its
// ready pipe.
var ErrWatcherUsage = errclass.New(errclass.Invalid, "the workspace watcher needs --state and its ready pipe on fd 3")

// WatcherMain is the hidden WatcherCommand: the workspace watcher of
// session id, detached by session create, with vak's state dir state and
// its first pass reported on fd 3. SIGTERM (vak session rm, gc) stops it;
// whoever sent it makes the final sweep. SIGINT and SIGHUP do not reach it
// (a session of its own, no terminal).
func WatcherMain(ctx context.Context, state, id string) error {
	ready := os.NewFile(3, "ready")
	if ready == nil || state == "" {
		return ErrWatcherUsage
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	m := &Manager{StateDir: state}
	defer m.Close()
	return m.RunWatcher(ctx, id, ready)
}
