package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"

	"vak/internal/worker/wire"
)

// Files executes the file tools. The worker adapts fsguard to it; errors
// should be *Error values with a stable code.
type Files interface {
	Read(wire.ReadArgs) (*wire.ReadResult, error)
	Write(wire.WriteArgs) (*wire.WriteResult, error)
	Edit(wire.EditArgs) (*wire.EditResult, error)
	Glob(wire.GlobArgs) (*wire.GlobResult, error)
	Grep(wire.GrepArgs) (*wire.GrepResult, error)
}

// Shell runs bash requests. emit, if non-nil, streams output.
type Shell interface {
	Bash(ctx context.Context, a wire.BashArgs, emit func(stream string, data []byte)) (*wire.BashResult, error)
}

// InteractiveShell is a Shell that can also run interactive requests
// (BashArgs.Interactive or TTY): the command reads in, which the server
// feeds from input requests and resizes.
type InteractiveShell interface {
	Shell
	BashInteractive(ctx context.Context, a wire.BashArgs, in *Interaction, emit func(stream string, data []byte)) (*wire.BashResult, error)
}

// StartingShell is a Shell that starts a bash request's command apart from
// waiting for it. The server starts a non-interactive request's command on
// the goroutine that reads requests and waits for it on another, so that
// no hand-off between goroutines (and the threads they sleep on) stands
// between a request and its fork (see sandbox.WorkerOutcome.Serve).
// StartBash must return promptly: the next request waits for it.
type StartingShell interface {
	Shell
	StartBash(ctx context.Context, a wire.BashArgs, emit func(stream string, data []byte)) (wait func() (*wire.BashResult, error), err error)
}

// Server serves the protocol on one connection.
type Server struct {
	Files Files
	Shell Shell
	// Ready is sent as the first line (its Event field is set to "ready").
	Ready wire.Event

	wmu sync.Mutex
	w   *bufio.Writer

	mu       sync.Mutex
	inflight map[string]context.CancelFunc
	inputs   map[string]*Interaction
	wg       sync.WaitGroup
	sem      chan struct{}
}

// tools are the tools this server serves: bash, and the file tools unless
// they are unavailable here (every call would answer unsupported).
func (s *Server) tools() []string {
	if _, ok := s.Files.(unavailableFiles); ok || s.Files == nil {
		return []string{wire.OpBash}
	}
	return []string{wire.OpBash, wire.OpRead, wire.OpWrite, wire.OpEdit, wire.OpGlob, wire.OpGrep}
}

// Serve reads requests from r and writes responses and events to w until r
// reaches EOF; then it waits for requests in flight and returns. ctx cancels
// everything in flight, and so does the peer of a Unix socket r hanging up
// (closing both sides) while Serve waits: see watchHangUp.
func (s *Server) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	s.w = bufio.NewWriterSize(w, 64<<10)
	s.inflight = map[string]context.CancelFunc{}
	s.inputs = map[string]*Interaction{}
	s.sem = make(chan struct{}, wire.MaxConcurrent)
	ready := s.Ready
	ready.Event, ready.Version = "ready", wire.ProtocolVersion
	if err := s.send(ready); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lr := wire.NewLineReader(r, wire.MaxRequestBytes)
	for {
		line, err := lr.Next()
		if line.TooLong {
			// Answered under its id when it has one, so that a client
			// waiting for it gets the answer.
			s.reply(wire.Response{ID: line.StringID(), Error: wire.TooLarge(line.Size)})
		} else if len(bytes.TrimSpace(line.Data)) > 0 {
			s.dispatch(ctx, line.Data)
		}
		if err != nil {
			// A client that ended its requests (EOF) gets the answers in
			// flight; one that hung up gets its commands canceled.
			stop := watchHangUp(r, cancel)
			s.wg.Wait()
			stop()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func (s *Server) dispatch(ctx context.Context, line []byte) {
	var req wire.Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		// Salvage the id if the line is at least an object with one.
		var idOnly struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(line, &idOnly)
		s.reply(wire.Response{ID: idOnly.ID, Error: wire.Errorf(wire.CodeProtocol, "malformed request: %v", err)})
		return
	}
	if req.ID == "" {
		s.reply(wire.Response{Error: wire.Errorf(wire.CodeProtocol, "request has no id")})
		return
	}
	switch req.Op {
	case wire.OpCancel:
		var a wire.CancelArgs
		if err := strictArgs(req.Args, &a); err != nil {
			s.reply(wire.Response{ID: req.ID, Error: err})
			return
		}
		s.mu.Lock()
		c, ok := s.inflight[a.Target]
		s.mu.Unlock()
		if !ok {
			s.reply(wire.Response{ID: req.ID, Error: wire.Errorf(wire.CodeUnknownID, "no request %q in flight", a.Target)})
			return
		}
		c()
		s.result(req.ID, struct{}{})
		return
	case wire.OpPing:
		s.result(req.ID, struct{}{})
		return
	case wire.OpTools:
		if err := strictArgs(req.Args, &struct{}{}); err != nil {
			s.reply(wire.Response{ID: req.ID, Error: err})
			return
		}
		s.result(req.ID, wire.ToolsResult{Tools: s.tools()})
		return
	case wire.OpInput:
		var a wire.InputArgs
		if err := strictArgs(req.Args, &a); err != nil {
			s.reply(wire.Response{ID: req.ID, Error: err})
			return
		}
		it := s.interaction(a.Target)
		if it == nil {
			s.reply(wire.Response{ID: req.ID, Error: wire.Errorf(wire.CodeUnknownID, "no interactive request %q in flight", a.Target)})
			return
		}
		// The command takes the input when it reads: answer then, without
		// holding up the request stream.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := it.Input(a.Data, a.EOF); err != nil {
				s.reply(wire.Response{ID: req.ID, Error: wire.Errorf(wire.CodeUnknownID, "input for %q: %v", a.Target, err)})
				return
			}
			s.result(req.ID, struct{}{})
		}()
		return
	case wire.OpResize:
		var a wire.ResizeArgs
		if err := strictArgs(req.Args, &a); err != nil {
			s.reply(wire.Response{ID: req.ID, Error: err})
			return
		}
		it := s.interaction(a.Target)
		if it == nil {
			s.reply(wire.Response{ID: req.ID, Error: wire.Errorf(wire.CodeUnknownID, "no interactive request %q in flight", a.Target)})
			return
		}
		it.Resize(a.TTYSize)
		s.result(req.ID, struct{}{})
		return
	case wire.OpSignal:
		var a wire.SignalArgs
		if err := strictArgs(req.Args, &a); err != nil {
			s.reply(wire.Response{ID: req.ID, Error: err})
			return
		}
		if err := wire.CheckSignal(a.Signal); err != nil {
			s.reply(wire.Response{ID: req.ID, Error: err})
			return
		}
		it := s.interaction(a.Target)
		if it == nil {
			s.reply(wire.Response{ID: req.ID, Error: wire.Errorf(wire.CodeUnknownID, "no interactive request %q in flight", a.Target)})
			return
		}
		if err := it.Signal(a.Signal); err != nil {
			var we *wire.Error
			if !errors.As(err, &we) {
				we = wire.Errorf(wire.CodeUnknownID, "signal for %q: %v", a.Target, err)
			}
			s.reply(wire.Response{ID: req.ID, Error: we})
			return
		}
		s.result(req.ID, struct{}{})
		return
	case wire.OpBash, wire.OpRead, wire.OpWrite, wire.OpEdit, wire.OpGlob, wire.OpGrep:
	default:
		s.reply(wire.Response{ID: req.ID, Error: wire.Errorf(wire.CodeProtocol, "unknown op %q", req.Op)})
		return
	}
	// A bash request's arguments are decoded once, here: they say whether
	// it is interactive, and handle runs them (or answers their error).
	var bash *wire.BashArgs
	var argErr *wire.Error
	if req.Op == wire.OpBash {
		bash = new(wire.BashArgs)
		if argErr = strictArgs(req.Args, bash); argErr != nil {
			bash = nil
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	if _, dup := s.inflight[req.ID]; dup {
		s.mu.Unlock()
		cancel()
		s.reply(wire.Response{ID: req.ID, Error: wire.Errorf(wire.CodeDuplicateID, "request %q is already in flight", req.ID)})
		return
	}
	s.inflight[req.ID] = cancel
	// An interactive command's input may follow on the next line: register
	// it before reading on.
	it := newInteraction(bash)
	if it != nil {
		s.inputs[req.ID] = it
	}
	s.mu.Unlock()
	// A non-interactive command starts here, if a slot is free; its wait
	// and everything else runs on a goroutine of its own.
	run := func() (any, error) { return s.handle(rctx, req, bash, argErr, it) }
	slot := false
	if st, ok := s.Shell.(StartingShell); ok && bash != nil && it == nil {
		select {
		case s.sem <- struct{}{}:
			slot = true
			run = s.startInline(rctx, st, req.ID, *bash)
		default:
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.inflight, req.ID)
			delete(s.inputs, req.ID)
			s.mu.Unlock()
			if it != nil {
				it.end()
			}
			cancel()
		}()
		if !slot {
			s.sem <- struct{}{}
		}
		defer func() { <-s.sem }()
		res, err := recovered(req.Op, run)
		if err != nil {
			var pe *wire.Error
			if !errors.As(err, &pe) {
				pe = wire.Errorf(wire.CodeInternal, "%v", err)
			}
			s.reply(wire.Response{ID: req.ID, Error: pe})
			return
		}
		s.result(req.ID, res)
	}()
}

// startInline starts a's command (StartBash) and returns what waits for
// it, or reports why it did not start.
func (s *Server) startInline(ctx context.Context, st StartingShell, id string, a wire.BashArgs) func() (any, error) {
	var wait func() (*wire.BashResult, error)
	_, err := recovered(wire.OpBash, func() (_ any, err error) {
		wait, err = st.StartBash(ctx, a, s.emitter(id, a))
		return nil, err
	})
	return func() (any, error) {
		if err != nil {
			return nil, err
		}
		return wait()
	}
}

// recovered runs f, a request's work: a panic becomes an internal error,
// never a dead worker.
func recovered(op string, f func() (any, error)) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, wire.Errorf(wire.CodeInternal, "panic in %s: %v\n%s", op, p, debug.Stack())
		}
	}()
	return f()
}

// emitter streams the output of request id as events, if a asks for it.
func (s *Server) emitter(id string, a wire.BashArgs) func(string, []byte) {
	if !a.Stream {
		return nil
	}
	return func(stream string, data []byte) {
		_ = s.send(wire.Event{Event: "output", ID: id, Stream: stream, Data: data})
	}
}

// handle runs one request (under recovered). A bash request comes with
// its arguments decoded (bash), or the error decoding them gave (argErr).
func (s *Server) handle(ctx context.Context, req wire.Request, bash *wire.BashArgs, argErr *wire.Error, it *Interaction) (res any, err error) {
	switch req.Op {
	case wire.OpBash:
		if argErr != nil {
			return nil, argErr
		}
		a := *bash
		emit := s.emitter(req.ID, a)
		if a.Interactive || a.TTY != nil {
			sh, ok := s.Shell.(InteractiveShell)
			if !ok || it == nil {
				return nil, wire.Errorf(wire.CodeUnsupported, "this worker runs no interactive commands")
			}
			return sh.BashInteractive(ctx, a, it, emit)
		}
		return s.Shell.Bash(ctx, a, emit)
	case wire.OpRead:
		var a wire.ReadArgs
		if err := strictArgs(req.Args, &a); err != nil {
			return nil, err
		}
		return s.Files.Read(a)
	case wire.OpWrite:
		var a wire.WriteArgs
		if err := strictArgs(req.Args, &a); err != nil {
			return nil, err
		}
		return s.Files.Write(a)
	case wire.OpEdit:
		var a wire.EditArgs
		if err := strictArgs(req.Args, &a); err != nil {
			return nil, err
		}
		return s.Files.Edit(a)
	case wire.OpGlob:
		var a wire.GlobArgs
		if err := strictArgs(req.Args, &a); err != nil {
			return nil, err
		}
		return s.Files.Glob(a)
	case wire.OpGrep:
		var a wire.GrepArgs
		if err := strictArgs(req.Args, &a); err != nil {
			return nil, err
		}
		return s.Files.Grep(a)
	}
	return nil, wire.Errorf(wire.CodeProtocol, "unknown op %q", req.Op)
}

// interaction returns the input side of the interactive request id.
func (s *Server) interaction(id string) *Interaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inputs[id]
}

// newInteraction returns an Interaction for an interactive bash request
// (its decoded arguments), nil for anything else (nil: not bash, or
// malformed arguments, which fail in handle).
func newInteraction(a *wire.BashArgs) *Interaction {
	if a == nil || (!a.Interactive && a.TTY == nil) {
		return nil
	}
	var sz wire.TTYSize
	if a.TTY != nil {
		sz = *a.TTY
	}
	return NewInteraction(sz)
}

func strictArgs(raw json.RawMessage, v any) *wire.Error {
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return wire.Errorf(wire.CodeProtocol, "bad args: %v", err)
	}
	return nil
}

func (s *Server) result(id string, v any) {
	data, err := wire.Marshal(v)
	if err != nil {
		s.reply(wire.Response{ID: id, Error: wire.Errorf(wire.CodeInternal, "encode result: %v", err)})
		return
	}
	s.reply(wire.Response{ID: id, OK: true, Result: data})
}

func (s *Server) reply(r wire.Response) { _ = s.send(r) }

func (s *Server) send(v any) error {
	data, err := wire.Marshal(v)
	if err != nil {
		return fmt.Errorf("worker: encode: %w", err)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.w.Write(data)
	s.w.WriteByte('\n')
	return s.w.Flush()
}
