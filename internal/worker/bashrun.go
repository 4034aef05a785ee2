package worker

import (
	"context"
	"io"
	"os"
	"syscall"
	"time"

	"vak/internal/worker/wire"
)

// BashRun is BashArgv for a command that run runs instead of a process
// started here (a command-scoped backend that runs its sandbox from this
// process, sandbox.Runner): output limits or streaming, timeout, cancel
// and tripwire as for Bash. run gets the lifeline (Lifeline) and must
// return promptly once its context is canceled, which is how a timeout or
// a cancel ends it; the result then says so, as for a killed process
// (Signal "killed", exit status 137). a.Command, a.Cwd and a.Env must be
// empty: they are run's; a.Stdin is not read (run's stdin is the
// lifeline, as BashArgv's is when there is one).
func (x *Exec) BashRun(ctx context.Context, a wire.BashArgs, run func(ctx context.Context, lifeline *os.File, stdout, stderr io.Writer) (int, error), emit func(string, []byte)) (*wire.BashResult, error) {
	if a.Command != "" || a.Cwd != "" || len(a.Env) != 0 {
		return nil, wire.Errorf(wire.CodeProtocol, "a command run by its backend takes no command, cwd or env fields")
	}
	before := x.tripBefore()
	stdout, stderr := sinks(a, emit)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timer <-chan time.Time
	if timeout := x.timeout(a); timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	type outcome struct {
		code int
		err  error
	}
	done := make(chan outcome, 1)
	start := time.Now()
	go func() {
		code, err := run(rctx, x.Lifeline, stdout, stderr)
		done <- outcome{code, err}
	}()
	var reason string
	var out outcome
	select {
	case out = <-done:
	case <-timer:
		reason = "timeout"
	case <-ctx.Done():
		reason = "cancel"
	}
	if reason != "" {
		cancel()
		out = <-done
	} else if ctx.Err() != nil {
		// run returned because ctx ended (its own context is ctx's).
		reason = "cancel"
	}
	if out.err != nil {
		return nil, wire.Errorf(wire.CodeExec, "%v", out.err)
	}
	res := &wire.BashResult{DurationMS: time.Since(start).Milliseconds(), ExitCode: out.code}
	if reason != "" {
		res.TimedOut, res.Canceled = reason == "timeout", reason == "cancel"
		res.Signal, res.ExitCode = syscall.SIGKILL.String(), 128+int(syscall.SIGKILL)
	}
	return x.finish(before, res, stdout, stderr)
}
