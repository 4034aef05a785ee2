package worker

import (
	"context"
	"os"
	"sync"
	"time"

	"vak/internal/worker/wire"
)

// What only the Linux container worker (RunContainer) uses: its child
// registry and the activity that drives its idle timeout.

func newChildRegistry() *childRegistry { return &childRegistry{pids: map[int]bool{}} }

// activity tracks requests for the idle timeout. It also sets the mtime of
// a file (the socket) at most once a second, so the host can see when the
// session was last used without asking the worker.
type activity struct {
	mu       sync.Mutex
	inflight int
	last     time.Time
	touched  time.Time
	touch    string
}

func (a *activity) begin() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight++
	a.mark()
}

func (a *activity) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	a.mark()
}

func (a *activity) mark() {
	now := time.Now()
	a.last = now
	if a.touch != "" && now.Sub(a.touched) >= time.Second {
		a.touched = now
		os.Chtimes(a.touch, now, now)
	}
}

// idle is how long nothing has been in flight.
func (a *activity) idle(now time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight > 0 {
		return 0
	}
	return now.Sub(a.last)
}

// trackedFiles and trackedShell count requests as activity.
type trackedFiles struct {
	f Files
	a *activity
}

func (t *trackedFiles) Read(x wire.ReadArgs) (*wire.ReadResult, error) {
	t.a.begin()
	defer t.a.end()
	return t.f.Read(x)
}

func (t *trackedFiles) Write(x wire.WriteArgs) (*wire.WriteResult, error) {
	t.a.begin()
	defer t.a.end()
	return t.f.Write(x)
}

func (t *trackedFiles) Edit(x wire.EditArgs) (*wire.EditResult, error) {
	t.a.begin()
	defer t.a.end()
	return t.f.Edit(x)
}

func (t *trackedFiles) Glob(x wire.GlobArgs) (*wire.GlobResult, error) {
	t.a.begin()
	defer t.a.end()
	return t.f.Glob(x)
}

func (t *trackedFiles) Grep(x wire.GrepArgs) (*wire.GrepResult, error) {
	t.a.begin()
	defer t.a.end()
	return t.f.Grep(x)
}

type trackedShell struct {
	s Shell
	a *activity
}

func (t *trackedShell) Bash(ctx context.Context, x wire.BashArgs, emit func(string, []byte)) (*wire.BashResult, error) {
	t.a.begin()
	defer t.a.end()
	return t.s.Bash(ctx, x, emit)
}

// BashInteractive implements InteractiveShell when the wrapped shell does:
// a session's `vak session exec -i` streams its stdin to the command.
func (t *trackedShell) BashInteractive(ctx context.Context, x wire.BashArgs, in *Interaction, emit func(string, []byte)) (*wire.BashResult, error) {
	sh, ok := t.s.(InteractiveShell)
	if !ok {
		return nil, wire.Errorf(wire.CodeUnsupported, "this worker runs no interactive commands")
	}
	t.a.begin()
	defer t.a.end()
	return sh.BashInteractive(ctx, x, in, emit)
}
