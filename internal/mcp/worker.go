package mcp

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"vak/internal/broker"
	"vak/internal/taskenv"
	"vak/internal/worker/wire"
)

// Worker is one running sandbox worker as the server uses it. A broker
// session is one (see BrokerWorker).
type Worker interface {
	// Bash runs a command in the sandbox.
	Bash(ctx context.Context, a wire.BashArgs) (*wire.BashResult, error)
	// Call sends one file-tool request (read, write, edit, glob, grep).
	Call(ctx context.Context, op string, args, result any) error
	// Done is closed when the worker has exited.
	Done() <-chan struct{}
	// Close ends the worker and everything it started.
	Close() error
}

// StartFunc starts a worker.
type StartFunc func(ctx context.Context) (Worker, error)

// BrokerWorker starts workers with the broker: the tools then run exactly
// as `vak run` runs a command (same backend, mode, limits, protected paths,
// network attachment).
func BrokerWorker(start func(ctx context.Context) (*broker.Session, error)) StartFunc {
	return func(ctx context.Context) (Worker, error) {
		s, err := start(ctx)
		if err != nil {
			return nil, err
		}
		return brokerWorker{s}, nil
	}
}

type brokerWorker struct{ s *broker.Session }

func (b brokerWorker) Bash(ctx context.Context, a wire.BashArgs) (*wire.BashResult, error) {
	return b.s.Bash(ctx, a, nil)
}

func (b brokerWorker) Call(ctx context.Context, op string, args, result any) error {
	return b.s.Client().Call(ctx, op, args, result)
}

func (b brokerWorker) Done() <-chan struct{} { return b.s.Client().Done() }
func (b brokerWorker) Close() error          { return b.s.Close() }

// pool keeps one warm worker and replaces it when it has exited.
type pool struct {
	start StartFunc

	mu     sync.Mutex
	cur    Worker
	closed bool
}

var errClosed = errors.New("the MCP server is shutting down")

// get returns the running worker, starting one if there is none or the
// last one exited. Concurrent callers share one start.
func (p *pool) get(ctx context.Context) (Worker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if p.cur != nil {
		select {
		case <-p.cur.Done():
			p.cur.Close() // reap it and undo what its backend prepared
			p.cur = nil
		default:
			return p.cur, nil
		}
	}
	w, err := p.start(ctx)
	if err != nil {
		return nil, fmt.Errorf("start the sandbox worker: %w", err)
	}
	p.cur = w
	return w, nil
}

// close ends the current worker; later calls fail.
func (p *pool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.cur == nil {
		return nil
	}
	err := p.cur.Close()
	p.cur = nil
	return err
}

// SessionWorker serves bash from a task-environment session (a long-lived
// container: what one call installs, the next finds) and the file tools from
// a host worker started by files (on the canonical workspace under fsguard,
// as without a session). open connects to the session; it is called again
// when the connection or the host worker ended.
func SessionWorker(files StartFunc, open func(ctx context.Context) (*taskenv.Session, error)) StartFunc {
	return func(ctx context.Context) (Worker, error) {
		fw, err := files(ctx)
		if err != nil {
			return nil, err
		}
		s, err := open(ctx)
		if err != nil {
			fw.Close()
			return nil, err
		}
		w := &sessionWorker{Worker: fw, sess: s, done: make(chan struct{})}
		go func() {
			select {
			case <-fw.Done():
			case <-s.Done():
			}
			close(w.done)
		}()
		return w, nil
	}
}

type sessionWorker struct {
	Worker // the host worker: file tools
	sess   *taskenv.Session
	done   chan struct{}
}

func (w *sessionWorker) Bash(ctx context.Context, a wire.BashArgs) (*wire.BashResult, error) {
	// The command line goes to the session's worker as is: it runs it with
	// sh -c in the container and checks cwd against the workspace itself
	// (taskenv's Exec would quote an argv into a second shell). Only while
	// its workspace is watched, as taskenv's Exec.
	if err := w.sess.EnsureWatcher(ctx); err != nil {
		return nil, err
	}
	res, err := w.sess.Client().Bash(ctx, a, nil)
	if err != nil && errors.Is(err, wire.ErrWorkerExited) {
		return nil, fmt.Errorf("session %s: its worker exited (the container stopped or was removed): %w", w.sess.ID(), err)
	}
	return res, err
}

func (w *sessionWorker) Done() <-chan struct{} { return w.done }

// Close closes the connection to the session (which keeps running) and
// ends the host worker.
func (w *sessionWorker) Close() error {
	w.sess.Close()
	return w.Worker.Close()
}
