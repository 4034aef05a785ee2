package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"vak/internal/fsguard"
	"vak/internal/worker/wire"
)

// A Watcher keeps the tripwire's rules in force for the whole life of a
// session, not only around its commands: a background job that outlives
// its command, an inner container of a --docker session, or anything else
// that writes the workspace between two commands can plant a .git or a
// protected path that host tools run (git status runs core.fsmonitor,
// direnv runs .envrc on cd) before any later check. The watcher holds the
// workspace against a baseline (the workspace when the session began, so
// that no later state ever adopts a plant) and passes whenever the kernel
// reports a change in it (fsguard.Watch, inotify; a full walk where the
// Watch cannot keep current). A pass removes what the tripwire after a
// command would remove against the baseline, as the link or file itself
// and never through a link, and clears setuid and setgid bits.
//
// It runs on the host beside the sandbox: in the broker of a long-lived
// landlock session (vak mcp), and in a session's own watcher process (vak
// session; internal/taskenv).
type Watcher struct {
	// mu serializes passes, each with its report.
	mu     sync.Mutex
	x      *Exec
	before tripState
	// walkEvery is how often Run passes while the Watch walks (it gave
	// up): a multiple of the last pass's time, within bounds.
	walkEvery time.Duration
	// warned are the last pass's warnings (a warning that stands is
	// reported once).
	warned []string
	// owned says the Watch is the Watcher's own, not its baseline's
	// (WatchedSnapshot), which the baseline's Close releases.
	owned bool
}

// ErrNoBaseline reports a Watcher asked for without a baseline it can
// hold the workspace against.
var ErrNoBaseline = errors.New("worker: the workspace watcher has no baseline")

// Bounds of how often a Watcher whose Watch walks passes, and how often
// one with a working Watch wakes up with nothing reported.
const (
	minWalkEvery = time.Second
	maxWalkEvery = 30 * time.Second
	idleWake     = time.Minute
)

// NewWatcher returns a Watcher of the canonical workspace ws for protected
// (workspace-relative, as configured) against baseline, which must have
// been recorded (Snapshot). It watches nothing before its first Pass,
// unless the baseline is a WatchedSnapshot of ws, whose Watch it shares
// (the first Pass then walks no more).
func NewWatcher(ws string, protected []string, baseline *TripwireState) (*Watcher, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("worker: the workspace watcher: %w", fsguard.ErrUnsupported)
	}
	if baseline == nil {
		return nil, ErrNoBaseline
	}
	if err := baseline.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBaseline, err)
	}
	x := &Exec{Workspace: ws, Protected: protected, Watch: baseline.watchOf(ws)}
	owned := x.Watch == nil
	if owned {
		x.Watch = fsguard.NewWatch(ws)
	}
	x.watching.Store(true)
	return &Watcher{x: x, before: baseline.st, walkEvery: minWalkEvery, owned: owned}, nil
}

// Pass looks at what changed since the last pass (the first one walks the
// whole workspace and builds the watch), removes and clears what the
// baseline does not hold, and hands report what it removed, cleared or
// warned of, if anything (a warning the pass before also gave is left
// out, so one that stands is reported once, until it goes away and comes
// back); denied as for TripwireState.Sweep. Passes and their reports are
// serialized: once Pass returns, everything removed before it was called
// has been reported, by it or by an earlier pass (Run's included).
func (w *Watcher) Pass(report func(res *wire.BashResult, denied bool)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res := &wire.BashResult{}
	start := time.Now()
	denied, err := w.x.tripCheck(w.before, res)
	if err != nil {
		res.TripwireWarnings = append(res.TripwireWarnings, err.Error())
	}
	if w.x.Watch.Err() != nil {
		w.walkEvery = min(max(20*time.Since(start), minWalkEvery), maxWalkEvery)
	}
	now := res.TripwireWarnings
	res.TripwireWarnings = slices.DeleteFunc(slices.Clone(now), func(s string) bool { return slices.Contains(w.warned, s) })
	w.warned = now
	if len(res.ProtectedRemoved)+len(res.SetuidCleared)+len(res.TripwireWarnings) > 0 {
		report(res, denied)
	}
}

// Err says why the watcher walks instead of being told of each change
// (fsguard.Watch.Err), or nil.
func (w *Watcher) Err() error { return w.x.Watch.Err() }

// Run passes (Pass) at once and then whenever the kernel reports a change
// in the workspace, until ctx ends. Where the Watch gave up (Err), it
// passes every second or more (twenty times the last walk, at most every
// 30 s).
func (w *Watcher) Run(ctx context.Context, report func(res *wire.BashResult, denied bool)) {
	for ctx.Err() == nil {
		w.Pass(report)
		every := idleWake
		if w.Err() != nil {
			w.mu.Lock()
			every = w.walkEvery
			w.mu.Unlock()
		}
		w.x.Watch.Wait(ctx, every)
	}
}

// Close releases the watch, unless it is its baseline's.
func (w *Watcher) Close() error {
	if !w.owned {
		return nil
	}
	return w.x.Watch.Close()
}
