package worker

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"vak/internal/fsguard"
	"vak/internal/hostenv"
	"vak/internal/paths"
	"vak/internal/worker/wire"
)

// DefaultShell runs bash requests.
const DefaultShell = "/bin/sh"

// waitDelay is how long a finished shell's output pipes may stay open (held
// by background children) before the result is returned anyway.
const waitDelay = 500 * time.Millisecond

// Exec runs bash requests as `sh -c COMMAND` in the workspace.
type Exec struct {
	// Workspace is the canonical workspace path.
	Workspace string
	// ShellPath is the shell; empty means DefaultShell.
	ShellPath string
	// Env is the base environment of every command (already scrubbed by the
	// broker); request env is added on top.
	Env []string
	// DefaultTimeout applies when a request sets none; zero means none.
	DefaultTimeout time.Duration
	// Protected are workspace-relative paths that must not be created by a
	// command; ones that appear are removed after the command (tripwire).
	Protected []string
	// Launcher, if set, prefixes every command's argv (the reap shim of
	// session containers; see Subreaper). Without one the worker starts
	// commands itself, each as the leader of a new session.
	Launcher []string
	// Subreaper says the Launcher is the reap shim (ReapCommand): the worker
	// starts it with setsid, it makes itself a child subreaper, and a timeout
	// or cancel kills the command's whole tree by parent links, so processes
	// that left the session (setsid, double fork) die too.
	Subreaper bool
	// NoTripwire turns the checks around each command off (full access:
	// nothing is sandboxed, and what the command does is the user's).
	NoTripwire bool
	// Watch, if set, keeps the tripwire's walk of the workspace current
	// between commands (fsguard.Watch), so that a pass costs what changed
	// rather than what the workspace holds. Set it only where every writer
	// of the workspace shares this kernel: a worker beside its commands.
	// It is used from the second command on: a worker that runs one
	// command walks twice, as without it, and does not pay for watches it
	// would not use (vak run's worker walks not at all: Spec.SweptAtClose).
	Watch *fsguard.Watch
	// Lifeline, if set, is the stdin of every command instead of the
	// request's (the docker backend: see Spec.Lifeline); an interactive
	// command gets it on sandbox.InteractiveLifelineFD instead.
	Lifeline *os.File
	// RawTerminal starts a command's terminal (a request with a TTY) with
	// raw input: the command only relays it to a terminal of its own, as
	// the docker CLI of `docker exec -it` does, and sets it raw itself,
	// but what was typed before that would have been cooked (an
	// end-of-file character turned into a NUL byte, a Ctrl-C into a
	// signal to the relay).
	RawTerminal bool
	// Sessions, if set, names a command's sessions for its kill
	// (sandbox.WorkerOutcome.Sessions): its own, and those its processes
	// made with setsid.
	Sessions func(root int) ([]int, error)
	// Spawn, if set, starts every command: it runs start, which forks it,
	// where the backend needs it forked (sandbox.WorkerOutcome.Spawn).
	Spawn func(start func() error) error

	// reg, if set, records running commands so that a PID-1 worker reaping
	// orphans never reaps a command os/exec still waits for.
	reg *childRegistry
	// warm, if set, hands commands to reap shims started ahead of need
	// (their start-up is the slowest part of a short command).
	warm *warmShims

	// null is /dev/null, opened once: the stdin of every command that has
	// none (os/exec would open and close it for each).
	nullOnce sync.Once
	null     *os.File

	// ledger, if set, is what the tripwire scans with instead (a
	// TripwireState's sweep, LedgerSnapshot).
	ledger *keptLedger
	// watching is set once a command's tripwire finished: later commands
	// use Watch.
	watching atomic.Bool
}

// envName is compiled on first use: every worker process would pay for it
// at start-up otherwise.
var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// reservedEnv are variables the worker controls; requests cannot set them.
var reservedEnv = []string{"HOME", "TMPDIR", "TMP", "TEMP", "PWD", "OLDPWD"}

// start starts cmd through Spawn, if set.
func (x *Exec) start(cmd *exec.Cmd) error {
	if x.Spawn == nil {
		return x.reg.start(cmd)
	}
	return x.Spawn(func() error { return x.reg.start(cmd) })
}

// Bash implements Shell.
func (x *Exec) Bash(ctx context.Context, a wire.BashArgs, emit func(string, []byte)) (*wire.BashResult, error) {
	return x.bash(ctx, a, nil, nil, emit)
}

// BashArgv runs argv itself instead of `sh -c a.Command`, with everything
// else as Bash does for a (working directory, environment, stdin or
// lifeline, output limits, timeout, kill, tripwire; a.Command is ignored).
// It is for a trusted caller that built argv itself: the broker running a
// command-scoped backend's wrapper (the `docker run` argv) without a worker
// process. argv[0] is looked up in the PATH of this process, as os/exec
// does.
//
// The result is what `sh -c` of the quoted argv would report: a command
// killed by a signal (not by the timeout or a cancel) is exit status 128+n
// with the shell's message on stderr ("Killed"), no Signal.
func (x *Exec) BashArgv(ctx context.Context, argv []string, a wire.BashArgs, emit func(string, []byte)) (*wire.BashResult, error) {
	if err := checkArgv(argv); err != nil {
		return nil, err
	}
	return x.bash(ctx, a, argv, nil, emit)
}

// BashArgvInteractive is BashArgv for an interactive command (see
// BashInteractive): `vak session exec -t` runs its `docker exec -it` this
// way, on a terminal of its own process (RawTerminal).
func (x *Exec) BashArgvInteractive(ctx context.Context, argv []string, a wire.BashArgs, in *Interaction, emit func(string, []byte)) (*wire.BashResult, error) {
	if err := checkArgv(argv); err != nil {
		return nil, err
	}
	if emit == nil || a.Stdin != nil {
		return nil, wire.Errorf(wire.CodeProtocol, "an interactive request streams its output and has no stdin field")
	}
	return x.bash(ctx, a, argv, in, emit)
}

// checkArgv refuses an argv that no exec can carry.
func checkArgv(argv []string) error {
	if len(argv) == 0 {
		return wire.Errorf(wire.CodeProtocol, "empty argv")
	}
	for _, s := range argv {
		if strings.IndexByte(s, 0) >= 0 {
			return wire.Errorf(wire.CodeProtocol, "argv contains a NUL byte")
		}
	}
	return nil
}

// BashInteractive implements InteractiveShell: the command reads in, and
// with a.TTY set it runs on a pseudo-terminal the worker allocates and
// owns (the master never leaves the worker).
func (x *Exec) BashInteractive(ctx context.Context, a wire.BashArgs, in *Interaction, emit func(string, []byte)) (*wire.BashResult, error) {
	if emit == nil || a.Stdin != nil {
		return nil, wire.Errorf(wire.CodeProtocol, "an interactive request streams its output and has no stdin field")
	}
	return x.bash(ctx, a, nil, in, emit)
}

// StartBash implements StartingShell: it starts a's command and returns
// what waits for it. A check before the command that takes longer than
// a start (the tripwire's, where this worker makes one) is left to wait:
// the caller is the request loop, which must get back to reading.
func (x *Exec) StartBash(ctx context.Context, a wire.BashArgs, emit func(string, []byte)) (wait func() (*wire.BashResult, error), err error) {
	if !x.NoTripwire {
		return func() (*wire.BashResult, error) { return x.Bash(ctx, a, emit) }, nil
	}
	r, err := x.startBash(ctx, a, nil, nil, emit)
	if err != nil {
		return nil, err
	}
	return r.wait, nil
}

// bash runs a: through the shell, or, with direct set, direct itself
// (BashArgv).
func (x *Exec) bash(ctx context.Context, a wire.BashArgs, direct []string, in *Interaction, emit func(string, []byte)) (*wire.BashResult, error) {
	r, err := x.startBash(ctx, a, direct, in, emit)
	if err != nil {
		return nil, err
	}
	return r.wait()
}

// started is a command bash started: what wait needs to see it end and
// report it.
type started struct {
	x              *Exec
	proc           process
	relay          *relays
	direct         []string
	before         tripState
	stdout, stderr outputSink
	start          time.Time
	kill           func(pid int)
	timer          *time.Timer
	// done tells the killer the command ended; it then answers on why
	// ("", "timeout" or "cancel").
	done chan struct{}
	why  chan string
}

// startBash checks a, starts its command and the killer that enforces its
// timeout and cancel.
func (x *Exec) startBash(ctx context.Context, a wire.BashArgs, direct []string, in *Interaction, emit func(string, []byte)) (*started, error) {
	if strings.IndexByte(a.Command, 0) >= 0 {
		return nil, wire.Errorf(wire.CodeProtocol, "command contains a NUL byte")
	}
	cwd, err := x.resolveCwd(a.Cwd)
	if err != nil {
		return nil, err
	}
	env := slices.Clone(x.Env)
	for _, k := range sortedKeys(a.Env) {
		v := a.Env[k]
		if !envName().MatchString(k) || slices.Contains(reservedEnv, k) || strings.HasPrefix(k, "VAK_") {
			return nil, wire.Errorf(wire.CodeProtocol, "environment variable %q may not be set", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, wire.Errorf(wire.CodeProtocol, "environment variable %q contains a NUL byte", k)
		}
		env = hostenv.Set(env, k+"="+v)
	}
	env = hostenv.Set(env, "PWD="+cwd)
	timeout := x.timeout(a)

	argv := append(slices.Clone(x.Launcher), x.shell(), "-c", a.Command)
	if direct != nil {
		argv = append(slices.Clone(x.Launcher), direct...)
	}
	before := x.tripBefore()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = cwd, env
	if len(x.Launcher) == 0 && direct == nil {
		cmd.Args[0] = "sh"
	}
	if len(x.Launcher) == 0 || x.Subreaper {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if x.Lifeline != nil && in != nil {
		// An interactive wrapped command: its stdin is the user's, the
		// lifeline moves to its own descriptor
		// (sandbox.InteractiveLifelineFD).
		cmd.ExtraFiles = []*os.File{x.Lifeline}
	} else if x.Lifeline != nil {
		cmd.Stdin = x.Lifeline
	} else if a.Stdin != nil {
		cmd.Stdin = strings.NewReader(*a.Stdin)
	} else if null := x.devNull(); null != nil {
		cmd.Stdin = null
	}
	stdout, stderr := sinks(a, emit)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = waitDelay
	var relay *relays
	if in != nil {
		if relay, err = x.interact(cmd, a.TTY != nil, in, emit); err != nil {
			return nil, err
		}
	}

	start := time.Now()
	var proc process = cmdProcess{cmd}
	if relay != nil {
		err := x.start(cmd)
		relay.started()
		if err != nil {
			relay.finish()
			return nil, wire.Errorf(wire.CodeExec, "start %s: %v", argv[0], err)
		}
		in.watchSignals(x.signaler(cmd))
	} else if x.warm != nil {
		proc, err = x.warm.run(argv[len(x.Launcher):], cwd, env, a.Stdin, stdout, stderr)
		if err != nil {
			return nil, wire.Errorf(wire.CodeExec, "start %s: %v", argv[0], err)
		}
	} else if err := x.start(cmd); err != nil {
		return nil, wire.Errorf(wire.CodeExec, "start %s: %v", argv[0], err)
	}
	r := &started{x: x, proc: proc, relay: relay, direct: direct, before: before, stdout: stdout, stderr: stderr,
		start: start, kill: func(pid int) { killTree(pid, x.Sessions) }, done: make(chan struct{}), why: make(chan string, 1)}
	if x.Subreaper {
		r.kill = killSubtree
	}
	// The killer reports why it killed (or that it did not) once it is done.
	var timer <-chan time.Time
	if timeout > 0 {
		r.timer = time.NewTimer(timeout)
		timer = r.timer.C
	}
	go func() {
		select {
		case <-r.done:
			r.why <- ""
			return
		case <-timer:
			r.why <- "timeout"
		case <-ctx.Done():
			r.why <- "cancel"
		}
		r.kill(proc.pid())
	}()
	return r, nil
}

// wait waits for the command to end and reports it.
func (r *started) wait() (*wire.BashResult, error) {
	x, proc := r.x, r.proc
	defer x.reg.done(proc.cmd())
	if r.timer != nil {
		defer r.timer.Stop()
	}
	werr := proc.wait()
	if r.relay != nil {
		r.relay.finish()
	}
	close(r.done)
	reason := <-r.why
	timedOut, canceled := reason == "timeout", reason == "cancel"
	// A timed-out or canceled command's stragglers die with it. Background
	// jobs of a command that finished normally live on until the session ends.
	if timedOut || canceled {
		r.kill(proc.pid())
	}
	state := proc.cmd().ProcessState
	res := &wire.BashResult{DurationMS: time.Since(r.start).Milliseconds(), TimedOut: timedOut, Canceled: canceled}
	if werr != nil && !errors.Is(werr, exec.ErrWaitDelay) {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			return nil, wire.Errorf(wire.CodeExec, "wait: %v", werr)
		}
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal().String()
		res.ExitCode = 128 + int(ws.Signal())
		if r.direct != nil && reason == "" {
			// What the shell around it would have reported: its own
			// normal exit, and its message.
			res.Signal = ""
			if msg := shellSignalMessage(ws); msg != "" {
				r.stderr.Write([]byte(msg))
			}
		}
	} else {
		res.ExitCode = state.ExitCode()
	}
	return x.finish(r.before, res, r.stdout, r.stderr)
}

// timeout is a's timeout: its own, else the default.
func (x *Exec) timeout(a wire.BashArgs) time.Duration {
	if a.TimeoutMS > 0 {
		return time.Duration(a.TimeoutMS) * time.Millisecond
	}
	return x.DefaultTimeout
}

// sinks are where a command's output goes: emit, when streaming, else
// buffers capped at a's limit.
func sinks(a wire.BashArgs, emit func(string, []byte)) (stdout, stderr outputSink) {
	if emit != nil {
		return &streamWriter{emit: emit, stream: "stdout"}, &streamWriter{emit: emit, stream: "stderr"}
	}
	max := a.MaxOutputBytes
	if max <= 0 {
		max = wire.DefaultOutputBytes
	}
	if max > wire.MaxOutputBytes {
		max = wire.MaxOutputBytes
	}
	return &capBuffer{max: max}, &capBuffer{max: max}
}

// finish completes res of a command that ended: its buffered output and
// the tripwire's check.
func (x *Exec) finish(before tripState, res *wire.BashResult, stdout, stderr outputSink) (*wire.BashResult, error) {
	if c, ok := stdout.(*capBuffer); ok {
		res.Stdout, res.StdoutTruncated = c.String(), c.truncated
	}
	if c, ok := stderr.(*capBuffer); ok {
		res.Stderr, res.StderrTruncated = c.String(), c.truncated
	}
	if err := x.tripAfter(before, res); err != nil {
		return nil, wire.Errorf(wire.CodeExec, "%v", err)
	}
	return res, nil
}

// signaler returns how signals reach the interactive command cmd (a
// started leader of its own session, so its process group is its pid):
// its process group, like a terminal's interrupt reaches the foreground
// job. Under the reap shim the shim is in that group and survives them
// (Reap); the command gets them. A command-scoped backend's wrapper (the
// worker has a lifeline) gets them alone: the command runs inside the
// sandbox, out of reach of this process, and the wrapper forwards them
// there (sandbox.InteractiveWrapper); its own helpers (the docker CLIs)
// must not die of them. A command that does not lead its own session (a
// launcher other than the reap shim) gets none.
func (x *Exec) signaler(cmd *exec.Cmd) func(syscall.Signal) error {
	pid := cmd.Process.Pid
	if cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setsid {
		return func(syscall.Signal) error {
			return wire.Errorf(wire.CodeUnsupported, "signals need commands that lead their own session")
		}
	}
	target := -pid
	if x.Lifeline != nil {
		target = pid
	}
	// Under the reap shim the command starts after the shim set up its
	// signal handling: a signal before that would kill the shim instead.
	shimReady := !x.Subreaper || len(x.Launcher) == 0
	return func(sig syscall.Signal) error {
		if !shimReady {
			if err := waitShimReady(pid); err != nil {
				return err
			}
			shimReady = true
		}
		if err := syscall.Kill(target, sig); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return errCommandEnded
			}
			return wire.Errorf(wire.CodeInternal, "signal %v: %v", sig, err)
		}
		return nil
	}
}

// devNull returns /dev/null opened for reading, shared by every command
// (nil if it cannot be opened: os/exec then opens it itself).
func (x *Exec) devNull() *os.File {
	x.nullOnce.Do(func() {
		if f, err := os.Open(os.DevNull); err == nil {
			x.null = f
		}
	})
	return x.null
}

// process is a started command the worker waits for.
type process interface {
	pid() int
	wait() error
	cmd() *exec.Cmd // the process os/exec started (its ProcessState)
}

// cmdProcess is a command started here with its output wired by os/exec.
type cmdProcess struct{ c *exec.Cmd }

func (p cmdProcess) pid() int       { return p.c.Process.Pid }
func (p cmdProcess) wait() error    { return p.c.Wait() }
func (p cmdProcess) cmd() *exec.Cmd { return p.c }

func (x *Exec) shell() string {
	if x.ShellPath != "" {
		return x.ShellPath
	}
	return DefaultShell
}

// resolveCwd returns the absolute working directory, refusing anything
// outside the workspace (also through symlinks).
func (x *Exec) resolveCwd(cwd string) (string, error) {
	if strings.IndexByte(cwd, 0) >= 0 {
		return "", wire.Errorf(wire.CodeInvalidPath, "cwd contains a NUL byte")
	}
	p := cwd
	if p == "" {
		p = x.Workspace
	} else if !filepath.IsAbs(p) {
		p = filepath.Join(x.Workspace, p)
	}
	p = filepath.Clean(p)
	if !paths.Within(x.Workspace, p) {
		return "", wire.Errorf(wire.CodeOutside, "cwd %q is outside the workspace", cwd)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", wire.Errorf(wire.CodeNotFound, "cwd %q does not exist", cwd)
		}
		return "", wire.Errorf(wire.CodeInvalidPath, "cwd %q: %v", cwd, err)
	}
	if !paths.Within(x.Workspace, real) {
		return "", wire.Errorf(wire.CodeOutside, "cwd %q resolves outside the workspace", cwd)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", wire.Errorf(wire.CodeInvalidPath, "cwd %q is not a directory", cwd)
	}
	return real, nil
}

// tripBeforeLegacy records which protected paths exist, by name. It is
// used where fsguard.Tree is unsupported (macOS), whose worker runs inside
// the Seatbelt sandbox: a link it follows cannot lead it to a path the
// sandbox would let it change.
func (x *Exec) tripBeforeLegacy() tripState {
	st := tripState{prot: map[string]fsguard.Entry{}}
	for _, p := range x.Protected {
		if _, err := os.Lstat(filepath.Join(x.Workspace, p)); err == nil {
			st.prot[p] = fsguard.Entry{Kind: fsguard.File}
		}
	}
	return st
}

// tripAfterLegacy removes protected paths that a command created.
func (x *Exec) tripAfterLegacy(before tripState) []string {
	var removed []string
	for _, p := range x.Protected {
		if _, ok := before.prot[p]; ok {
			continue
		}
		full := filepath.Join(x.Workspace, p)
		if _, err := os.Lstat(full); err == nil {
			os.RemoveAll(full)
			removed = append(removed, p)
		}
	}
	return removed
}

type outputSink interface{ io.Writer }

// capBuffer keeps the first max bytes written and notes truncation.
type capBuffer struct {
	mu        sync.Mutex
	max       int64
	buf       []byte
	truncated bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - int64(len(c.buf))
	if room <= 0 {
		c.truncated = c.truncated || len(p) > 0
		return len(p), nil
	}
	if int64(len(p)) > room {
		c.buf = append(c.buf, p[:room]...)
		c.truncated = true
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// copyBufs are the buffers output is read into (ReadFrom): os/exec's
// io.Copy would allocate 32 KiB per stream and command otherwise.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readFrom copies r to w until r's end through a pooled buffer.
func readFrom(w io.Writer, r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	var n int64
	for {
		m, err := r.Read(*bp)
		if m > 0 {
			w.Write((*bp)[:m])
			n += int64(m)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// ReadFrom implements io.ReaderFrom (os/exec's copy of the output pipe).
func (c *capBuffer) ReadFrom(r io.Reader) (int64, error) { return readFrom(c, r) }

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.ToValidUTF8(string(c.buf), "\uFFFD")
}

// streamWriter forwards each write as an output event.
type streamWriter struct {
	emit   func(string, []byte)
	stream string
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.emit(s.stream, slices.Clone(p))
	return len(p), nil
}

// ReadFrom implements io.ReaderFrom (os/exec's copy of the output pipe).
func (s *streamWriter) ReadFrom(r io.Reader) (int64, error) { return readFrom(s, r) }

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
