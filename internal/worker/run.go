package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"vak/internal/fsguard"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// Run serves the protocol for spec on in/out until in is closed. entry is
// what the backend's worker entry returned: the restrictions in force (sent
// in the ready event) and how commands are started.
//
// Where the platform has no safe file tools (fsguard is Linux-only), the
// worker still starts: bash works and every file tool answers with code
// unsupported. Any other failure to open the workspace fails the start.
func Run(ctx context.Context, spec *Spec, entry sandbox.WorkerOutcome, in io.Reader, out io.Writer) error {
	// Run is called once the backend's worker entry has returned: the
	// restrictions are in force from here on.
	restricted := time.Now()
	UnignoreSignals()
	// A request loop on a thread of its own (entry.Serve) reads blocking:
	// the kernel then wakes that very thread for a request, where a polled
	// read would wake a poller that hands the request to it.
	if entry.Serve == nil {
		if p := pollable(in); p != in {
			defer p.(io.Closer).Close()
			in = p
		}
	}
	return run(ctx, spec, entry, in, out, func() (Files, io.Closer, error) {
		f, err := OpenFiles(spec.Workspace, spec.Mode, spec.Protected)
		if err != nil {
			return nil, nil, err
		}
		return f, f, nil
	}, restricted)
}

// processStart is when this process's Go packages were initialised (the
// ready event's Started).
var processStart = time.Now()

// run serves; restricted is when the restrictions came into force (zero:
// unknown); entry.Spawn, if set, starts every command (Exec.Spawn).
func run(ctx context.Context, spec *Spec, entry sandbox.WorkerOutcome, in io.Reader, out io.Writer, open func() (Files, io.Closer, error), restricted time.Time) error {
	files, closer, err := open()
	switch {
	case errors.Is(err, fsguard.ErrUnsupported):
		files = unavailableFiles{err: fsError(err)}
	case err != nil:
		return err
	default:
		defer closer.Close()
	}
	var lifeline *os.File
	if spec.Lifeline > 0 {
		if lifeline = os.NewFile(uintptr(spec.Lifeline), "lifeline"); lifeline == nil {
			return fmt.Errorf("worker: no lifeline on fd %d", spec.Lifeline)
		}
		defer lifeline.Close()
	}
	// Full access checks nothing (what the command does is the user's); a
	// one-command worker leaves the check to the broker's sweep
	// (Spec.SweptAtClose), a watched one to the broker's watcher
	// (Spec.Watched).
	noTripwire := spec.Mode == sandbox.FullAccess || spec.SweptAtClose || spec.Watched
	var watch *fsguard.Watch
	if !noTripwire {
		// The commands are ours, on this kernel: the tripwire can keep
		// its walk current instead of repeating it.
		watch = fsguard.NewWatch(spec.Workspace)
		defer watch.Close()
	}
	srv := &Server{
		Files: files,
		Shell: &Exec{
			Workspace:      spec.Workspace,
			Env:            spec.Env,
			DefaultTimeout: spec.DefaultTimeout,
			Protected:      spec.Protected,
			NoTripwire:     noTripwire,
			Watch:          watch,
			Launcher:       spec.Launcher,
			Lifeline:       lifeline,
			// A command-scoped backend's wrapper relays the terminal to
			// the container's (docker exec -it).
			RawTerminal: lifeline != nil,
			Spawn:       entry.Spawn,
			Sessions:    entry.Sessions,
		},
		Ready: wire.Event{Backend: spec.Backend, Sandbox: entry.Description, PID: os.Getpid(), Started: processStart.UnixNano()},
	}
	for _, p := range entry.Phases {
		srv.Ready.Phases = append(srv.Ready.Phases, wire.Phase{Name: p.Name, Start: unixNano(p.Start), End: unixNano(p.End)})
	}
	if !restricted.IsZero() {
		srv.Ready.Restricted = restricted.UnixNano()
	}
	if entry.Serve == nil {
		return srv.Serve(ctx, in, out)
	}
	entry.Serve(func() { err = srv.Serve(ctx, in, out) })
	return err
}

// unixNano is t in Unix nanoseconds, or 0 for the zero time (unknown).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// unavailableFiles answers every file tool with the error that kept the
// file tools from opening.
type unavailableFiles struct{ err error }

func (u unavailableFiles) Read(wire.ReadArgs) (*wire.ReadResult, error)    { return nil, u.err }
func (u unavailableFiles) Write(wire.WriteArgs) (*wire.WriteResult, error) { return nil, u.err }
func (u unavailableFiles) Edit(wire.EditArgs) (*wire.EditResult, error)    { return nil, u.err }
func (u unavailableFiles) Glob(wire.GlobArgs) (*wire.GlobResult, error)    { return nil, u.err }
func (u unavailableFiles) Grep(wire.GrepArgs) (*wire.GrepResult, error)    { return nil, u.err }

// Main is the re-executed worker's entry (`vak __worker --stage N`): it
// reads its spec from fd 3, runs the entry point the spec's backend
// registered (its re-exec stages, restrictions applied on the thread that
// execs), and serves the protocol on in/out. code is the exit status of a
// stage that ended the process's work itself (a re-exec that exited).
func Main(ctx context.Context, stage int, in io.Reader, out io.Writer) (code int, err error) {
	spec, raw, err := ReadSpec()
	if err != nil {
		return 0, err
	}
	// Each backend registered its own worker entry point; this is only a
	// lookup.
	entry, err := sandbox.LookupWorker(spec.Backend)
	if err != nil {
		return 0, err
	}
	outcome, err := entry(ctx, sandbox.WorkerStart{Stage: stage, Data: spec.Sandbox, RawSpec: raw})
	if err != nil || outcome.Exited {
		return outcome.Code, err
	}
	return 0, Run(ctx, spec, outcome, in, out)
}
