package broker

import (
	"context"
	"errors"
	"slices"
	"sync"

	"vak/internal/fsguard"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// sessionWatch is the workspace watcher of a long-lived session (see
// Options.Planted and worker.Watcher) and what it removed and cleared
// that no command's result has reported yet. A nil *sessionWatch does
// nothing.
type sessionWatch struct {
	w      *worker.Watcher
	report func(*wire.BashResult)
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	removed []string
	cleared []string
}

// startWatch runs w, the watcher of a long-lived session (made with its
// baseline, see workspaceWalk). Where there is none, err says why: a
// baseline that could not be recorded is reported (the sweep at Close
// says so too), and the worker then checks around each command itself
// (worker.Spec.Watched is unset); no fsguard here (not Linux) is not.
func startWatch(opts Options, w *worker.Watcher, err error) *sessionWatch {
	report := opts.Planted
	if report == nil {
		report = func(*wire.BashResult) {}
	}
	if w == nil {
		if err != nil && !errors.Is(err, fsguard.ErrUnsupported) {
			report(&wire.BashResult{TripwireWarnings: []string{err.Error()}})
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	sw := &sessionWatch{w: w, report: report, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(sw.done)
		w.Run(ctx, sw.record)
	}()
	return sw
}

// record keeps what a pass did and reports it.
func (sw *sessionWatch) record(res *wire.BashResult, _ bool) {
	sw.mu.Lock()
	sw.removed = append(sw.removed, res.ProtectedRemoved...)
	sw.cleared = append(sw.cleared, res.SetuidCleared...)
	sw.mu.Unlock()
	sw.report(res)
}

// into makes a pass now (so that whatever was removed before it is
// recorded) and adds to res what the watcher removed and cleared since
// the last result it was added to, which res does not report already:
// while the command ran, and before it (a background job's plant between
// two commands, a setuid file there when the session began).
func (sw *sessionWatch) into(res *wire.BashResult) {
	if sw == nil || res == nil {
		return
	}
	sw.w.Pass(sw.record)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for _, p := range sw.removed {
		if !slices.Contains(res.ProtectedRemoved, p) {
			res.ProtectedRemoved = append(res.ProtectedRemoved, p)
		}
	}
	for _, p := range sw.cleared {
		if !slices.Contains(res.SetuidCleared, p) {
			res.SetuidCleared = append(res.SetuidCleared, p)
		}
	}
	sw.removed, sw.cleared = nil, nil
}

// stop ends the watcher and waits for it.
func (sw *sessionWatch) stop() {
	if sw == nil {
		return
	}
	sw.cancel()
	<-sw.done
	sw.w.Close()
}
