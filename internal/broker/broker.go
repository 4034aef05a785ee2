// Package broker is vak's trusted side of command execution. It turns the
// effective config into a worker spec, starts the worker (the vak binary
// re-executed as `vak __worker`) contained by the resolved backend, and
// sends it the agent's tool calls. Model input never runs in the broker.
//
// For command-scoped backends (docker) the broker wraps each bash command
// into the backend's argv and sends that, quoted, as the bash request: the
// worker stays a small host-side protocol adapter, and the file tools keep
// running on the host under fsguard's checks.
package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"vak/internal/agenthome"
	"vak/internal/config"
	"vak/internal/fsguard"
	"vak/internal/hostenv"
	"vak/internal/keeper"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/shellquote"
	"vak/internal/trace"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// WorkerCommand is the hidden subcommand that runs a worker.
const WorkerCommand = sandbox.WorkerCommand

// TempPrefix names private temp dirs: TempPrefix + broker pid + "-" + random,
// so that CleanStale can tell the ones whose broker is gone.
const TempPrefix = "vak-tmp-"

// Options configure a session.
type Options struct {
	Config    *config.Config
	Workspace string // canonical
	Backend   sandbox.Backend
	// Executable is the vak binary to re-execute; empty means os.Executable.
	// A process backend may run another program instead (the landlock
	// backend runs the lean stage program this process embeds, when it
	// embeds one: package leanstage).
	Executable string
	// Stderr receives the worker's own diagnostics; nil keeps a tail for errors.
	Stderr io.Writer
	// Labels are added to containers (tests use vak.test=1).
	Labels map[string]string
	// Network, if set, attaches command containers to a proxied network
	// (command-scoped backends only; the others refuse it); nil means no
	// network.
	Network *sandbox.NetworkAttachment
	// HostTools are tools this trusted process serves next to the
	// worker's (the agent network, whose token must not enter the
	// sandbox): Tools lists each while it is Listed, CallHostTool serves
	// it; the worker never sees their calls.
	HostTools []HostTool
	// OneCommand says the session runs one command and then closes (vak
	// run). Where the broker sweeps the workspace at Close
	// (sandbox.WorkerLaunch.SweepAtClose, in workspace-write mode), that
	// sweep, made after every process of the sandbox is gone, is the
	// command's check: the worker makes none of its own
	// (worker.Spec.SweptAtClose), two walks of the workspace fewer.
	OneCommand bool
	// BashOnly says the session runs only non-interactive bash commands
	// (vak run without a terminal): no file tools, no interactive
	// commands. A command-scoped backend (sandbox.Wrapper) then starts no
	// worker process, whose only job would be to run the wrapper: the
	// broker runs each wrapped command itself, directly (no shell, so no
	// quoting layer to undo), through worker.Exec, the worker's own runner
	// (tripwire, output limits, timeout and kill, lifeline). Client is nil
	// in such a session. Process-scoped backends ignore it: their worker
	// is the sandbox.
	BashOnly bool
	// Planted, if set, is told what the session's workspace watcher
	// removed or cleared, or warned of, as it happens (see
	// worker.Watcher): a long-lived session (not OneCommand) of a process
	// backend in workspace-write mode holds the workspace against its
	// state before the sandbox ran anything, continuously, between and
	// during commands, so that a background job that outlives its command
	// plants nothing that lasts. What the watcher removed or cleared while
	// a command ran, or since the last command's result, is also in that
	// command's result. Planted is called from the watcher's goroutine.
	Planted func(*wire.BashResult)
}

// HostTool is a tool the trusted side serves next to the worker's
// (agentnet.Tool serves wire.ToolAgentNetwork).
type HostTool interface {
	// Name is the tool's name in the tool list.
	Name() string
	// Listed reports whether the tool is offered now.
	Listed() bool
	// Call serves one call with the protocol's JSON arguments.
	Call(ctx context.Context, args json.RawMessage) (any, error)
}

// Session is a running worker for one workspace.
type Session struct {
	opts      Options
	client    *wire.Client
	tempDir   string
	wrapper   sandbox.Wrapper // command-scoped backends only
	env       []string        // environment of sandboxed commands
	agentHome string          // persistent agent home of command-scoped backends ("": fresh)
	// release undoes what the process backend prepared (cgroups, ...).
	release func()
	// baseline is the workspace before the sandbox ran anything (a process
	// backend whose processes all end with the worker, see
	// sandbox.WorkerLaunch.SweepAtClose): Close sweeps against it once
	// every sandboxed process is gone.
	baseline *worker.TripwireState
	// swept is what that last sweep did.
	swept *wire.BashResult
	// watcher is the workspace watcher of a long-lived session
	// (Options.Planted), nil without one.
	watcher *sessionWatch
	// lifeline is the write end of a command-scoped worker's lifeline pipe
	// (worker.Spec.Lifeline): held until Close, closed by the kernel if
	// this process dies.
	lifeline *os.File
	// tr records Close's phases for vak run --trace (nil: nothing).
	tr *trace.Trace
	// local runs the wrapped commands of a bash-only session of a
	// command-scoped backend in this process (Options.BashOnly); client
	// is nil then.
	local *worker.Exec
	// lifeR is local's lifeline (the read end of the lifeline pipe).
	lifeR *os.File
	// exe is the vak binary (Options.Executable), planState the ledger
	// state a plan without a baseline came from (the trace, and a keeper
	// for the next runs: startKeeper).
	exe       string
	planState *worker.TripwireState
}

// Start starts a worker for opts.
func Start(ctx context.Context, opts Options) (*Session, error) {
	// Phases for vak run --trace (nil trace: nothing recorded).
	tr := trace.From(ctx)
	endPrepare := tr.Begin("backend prepare")
	cfg := opts.Config
	s := &Session{opts: opts, tr: tr}
	exe := opts.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("broker: find vak binary: %w", err)
		}
	}
	s.exe = exe
	spec := &worker.Spec{
		Backend:        opts.Backend.Name(),
		Workspace:      opts.Workspace,
		Mode:           cfg.Sandbox.Mode,
		Protected:      cfg.Files.Protected,
		DefaultTimeout: cfg.Sandbox.Timeout,
	}
	cmd := exec.Command(exe, WorkerCommand)
	cmd.Dir = opts.Workspace
	cmd.Stderr = opts.Stderr
	userHome, _ := os.UserHomeDir()

	var launch *sandbox.WorkerLaunch
	var lifeR *os.File
	var snapshot bool     // take the baseline (see Session.baseline)
	var noSetIDModes bool // sandbox.WorkerLaunch.NoSetIDModes
	switch b := opts.Backend.(type) {
	case sandbox.ProcessBackend:
		agentHome, err := agenthome.Ensure(cfg.Sandbox.Home, opts.Workspace)
		if err != nil {
			return nil, fmt.Errorf("broker: home %s: %w", cfg.Sandbox.Home, err)
		}
		tmp, err := os.MkdirTemp("", TempPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return nil, fmt.Errorf("broker: private temp dir: %w", err)
		}
		s.tempDir = tmp
		launch, err = b.PrepareWorker(ctx, sandbox.ProcessPolicy{
			Workspace:         opts.Workspace,
			Mode:              cfg.Sandbox.Mode,
			TempDir:           tmp,
			UserHome:          userHome,
			AgentHome:         agentHome,
			AgentHomeFallback: !cfg.Sandbox.HomeSet,
			ReadPaths:         cfg.Sandbox.ReadPaths,
			WritePaths:        cfg.Sandbox.WritePaths,
			Protected:         cfg.Files.Protected,
			Limits:            cfg.Sandbox.Limits,
			Env:               hostenv.ForProcess(cfg.Sandbox.Env...),
			AllowWeaker:       cfg.Sandbox.AllowWeaker,
			Network:           opts.Network,
		}, cmd)
		if err != nil {
			s.cleanup()
			if opts.Network != nil {
				err = fmt.Errorf("broker: %w", err)
			}
			return nil, err
		}
		s.release = launch.Cleanup
		s.env = launch.Env
		if launch.SweepAtClose && cfg.Sandbox.Mode == sandbox.WorkspaceWrite {
			// Background jobs outlive the command that started them (until
			// the session ends) and can plant after its check.
			snapshot, noSetIDModes = true, launch.NoSetIDModes
			spec.SweptAtClose = opts.OneCommand
		}
	case sandbox.Wrapper:
		s.wrapper = b
		var err error
		if s.agentHome, err = agenthome.Ensure(cfg.Sandbox.Home, opts.Workspace); err != nil {
			return nil, fmt.Errorf("broker: home %s: %w", cfg.Sandbox.Home, err)
		}
		spec.Env = b.HostEnv()
		s.env = hostenv.ForContainer(cfg.Sandbox.Env...)
		if lifeR, s.lifeline, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("broker: lifeline pipe: %w", err)
		}
		spec.Lifeline = lifelineFD
		if opts.BashOnly {
			s.lifeR = lifeR
			s.local = &worker.Exec{
				Workspace:      opts.Workspace,
				Env:            spec.Env,
				DefaultTimeout: cfg.Sandbox.Timeout,
				Protected:      cfg.Files.Protected,
				NoTripwire:     cfg.Sandbox.Mode == sandbox.FullAccess,
				Lifeline:       lifeR,
			}
			endPrepare()
			return s, nil
		}
	default:
		if opts.Network != nil {
			return nil, fmt.Errorf("broker: %w", sandbox.RefuseNetwork(b, opts.Network))
		}
		if b.Name() != string(sandbox.None) {
			return nil, fmt.Errorf("broker: backend %s: %w", b.Name(), sandbox.ErrNotYetAvailable)
		}
		spec.Env = os.Environ() // full access: nothing is sandboxed
	}
	if spec.Env == nil {
		spec.Env = s.env
	}
	// A process backend's spec waits for the walk of the workspace
	// (workspaceWalk), which overlaps the worker's start-up.
	var data []byte
	if launch == nil {
		var err error
		if data, err = spec.Encode(); err != nil {
			s.cleanup()
			return nil, err
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		s.cleanup()
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{r}
	if launch != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, launch.ExtraFiles...)
	}
	if lifeR != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, lifeR)
		if 2+len(cmd.ExtraFiles) != lifelineFD {
			s.cleanup()
			return nil, fmt.Errorf("broker: lifeline would be fd %d, not %d", 2+len(cmd.ExtraFiles), lifelineFD)
		}
	}
	cmd.Env = []string{"PATH=" + envOr("PATH", hostenv.DefaultPath)}
	// Go runtime knobs reach the worker process itself (tests use GOGC to
	// make garbage collection frequent); they never reach commands.
	cmd.Env = append(cmd.Env, hostenv.Lookup([]string{"GOGC", "GODEBUG", "GOMAXPROCS"})...)
	// The worker blocks on its spec, so whatever onStarted does (joining a
	// cgroup) happens before the sandbox runs anything; unless the backend
	// makes the worker wait for Started by itself (SpecFirst), then the
	// spec goes first and the worker starts up meanwhile.
	sendSpec := func() {
		go func() {
			w.Write(data)
			w.Close()
		}()
	}
	specFirst := launch != nil && launch.SpecFirst
	var walk *workspaceWalk
	onStarted := func(pid int) error {
		r.Close()
		if lifeR != nil {
			lifeR.Close()
		}
		if walk != nil {
			var err error
			if spec.Sandbox, err = walk.spec(launch); err == nil {
				// The session's watcher passes after every command:
				// that is the command's check (worker.Spec.Watched).
				spec.Watched = walk.watcher != nil
				data, err = spec.Encode()
			}
			if err != nil {
				w.Close()
				return err
			}
		}
		if specFirst {
			sendSpec()
		}
		if launch != nil && launch.Started != nil {
			if err := launch.Started(pid); err != nil {
				if !specFirst {
					w.Close()
				}
				return err
			}
		}
		if !specFirst {
			sendSpec()
		}
		return nil
	}
	endPrepare()
	spawned := time.Now()
	if launch != nil {
		// A long-lived session's watcher clears the setuid and setgid
		// bits of files that had them when the session began, so its
		// walk stats every file; a one-command run's sweep clears those
		// of files that gained them while it ran (see
		// worker.WatchedSnapshot).
		walk = startWalk(opts.Workspace, cfg.Files.Protected, launch.Spec != nil, snapshot, snapshot && !opts.OneCommand, noSetIDModes && opts.OneCommand, opts.OneCommand)
	}
	client, err := wire.Start(ctx, cmd, onStarted)
	if walk != nil {
		walk.wait(tr)
		s.baseline, s.planState = walk.baseline, walk.ledger
	}
	tr.Add("worker start (sandbox set-up) to ready", spawned, time.Now())
	if err != nil {
		s.baseline.Close()
		s.cleanup()
		return nil, fmt.Errorf("broker: %s worker: %w", opts.Backend.Name(), err)
	}
	s.client = client
	traceWorkerStart(tr, spawned, time.Now(), client.Ready())
	if snapshot && !opts.OneCommand {
		s.watcher = startWatch(opts, walk.watcher, walk.watchErr)
	}
	return s, nil
}

// traceWorkerStart splits the worker's start by the times in its ready
// event: before the worker's own process began (for landlock: stage 1 with
// the namespaces and the view, and stage 2's exec), the sandbox entry in it
// (stage 2's restrictions), and the rest up to the ready event. Times the
// worker did not report, or that are out of order (clocks are per process
// but the same wall clock), are left out.
func traceWorkerStart(tr *trace.Trace, spawned, ready time.Time, ev wire.Event) {
	if tr == nil || ev.Started == 0 {
		return
	}
	started := time.Unix(0, ev.Started)
	if started.Before(spawned) || started.After(ready) {
		return
	}
	tr.Add("  worker process start (landlock: stage 1, view, stage 2 exec)", spawned, started)
	// What the backend timed before the worker's process began (stage 1):
	// a phase without a start began when the worker was spawned.
	for _, p := range ev.Phases {
		s, e := spawned, time.Unix(0, p.End)
		if p.Start != 0 {
			s = time.Unix(0, p.Start)
		}
		if p.End == 0 || s.Before(spawned) || e.Before(s) || e.After(started) {
			continue
		}
		tr.Add("    "+p.Name, s, e)
	}
	if ev.Restricted == 0 {
		tr.Add("  worker up to ready", started, ready)
		return
	}
	restricted := time.Unix(0, ev.Restricted)
	if restricted.Before(started) || restricted.After(ready) {
		return
	}
	tr.Add("  sandbox entry (landlock: stage 2 restrictions)", started, restricted)
	tr.Add("  worker files and ready message", restricted, ready)
}

// Ready is the worker's ready event (what restrictions are in force). A
// bash-only session of a command-scoped backend, which has no worker,
// describes itself.
func (s *Session) Ready() wire.Event {
	if s.client == nil {
		return wire.Event{Event: "ready", Version: wire.ProtocolVersion, Backend: s.opts.Backend.Name(), PID: os.Getpid(),
			Sandbox: s.opts.Backend.Name() + ": no worker process (bash-only session); each bash command runs in its own container"}
	}
	return s.client.Ready()
}

// Client is the raw protocol client (file tools); nil in a bash-only
// session of a command-scoped backend (Options.BashOnly).
func (s *Session) Client() *wire.Client { return s.client }

// Tools is the session's tool list: the worker's (the protocol's tools
// op), then every host tool that is listed now. A host tool that is not
// listed is absent, not marked.
func (s *Session) Tools(ctx context.Context) ([]string, error) {
	tools := []string{wire.OpBash}
	if s.client != nil {
		var err error
		if tools, err = s.client.Tools(ctx); err != nil {
			return nil, fmt.Errorf("broker: tool list: %w", err)
		}
	}
	for _, h := range s.opts.HostTools {
		if h.Listed() && !slices.Contains(tools, h.Name()) {
			tools = append(tools, h.Name())
		}
	}
	return tools, nil
}

// CallHostTool serves a call of the host tool name (Options.HostTools) in
// this process. A tool that is not listed now, or not a host tool, is
// refused with wire.CodeProtocol, as a worker refuses an unknown op; the
// worker's own tools are called through Bash and Client.
func (s *Session) CallHostTool(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	for _, h := range s.opts.HostTools {
		if h.Name() != name {
			continue
		}
		if !h.Listed() {
			return nil, wire.Errorf(wire.CodeProtocol, "tool %q is not offered now", name)
		}
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		res, err := h.Call(ctx, args)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	}
	return nil, wire.Errorf(wire.CodeProtocol, "no host tool %q", name)
}

// Bash runs a command in the sandbox.
func (s *Session) Bash(ctx context.Context, a wire.BashArgs, onOutput func(stream string, data []byte)) (*wire.BashResult, error) {
	return s.bash(ctx, a, func(a wire.BashArgs) (*wire.BashResult, error) {
		return s.client.Bash(ctx, a, onOutput)
	}, onOutput)
}

// Interaction is the input side of an interactive command.
type Interaction struct {
	// Stdin is copied to the command until EOF; nil sends none.
	Stdin io.Reader
	// Resize delivers new terminal sizes (TTY commands).
	Resize <-chan wire.TTYSize
	// Signal delivers signals to the command, by name (one of
	// wire.Signals): to its process group, or on a command-scoped backend
	// to the command inside the sandbox (sandbox.InteractiveWrapper).
	Signal <-chan string
}

// BashInteractive runs an interactive command (a.Interactive or a.TTY set)
// in the sandbox: its terminal, if any, is allocated inside the sandbox by
// the worker. Only backends that sandbox.CheckInteractive accepts run them.
func (s *Session) BashInteractive(ctx context.Context, a wire.BashArgs, in Interaction, onOutput func(stream string, data []byte)) (*wire.BashResult, error) {
	if err := sandbox.CheckInteractive(s.opts.Backend); err != nil {
		return nil, err
	}
	if s.client == nil {
		return nil, fmt.Errorf("broker: %w: a bash-only session runs no interactive commands", ErrBashOnly)
	}
	return s.bash(ctx, a, func(a wire.BashArgs) (*wire.BashResult, error) {
		return s.client.BashInteractive(ctx, a, in.Stdin, in.Resize, in.Signal, onOutput)
	}, onOutput)
}

// ErrBashOnly reports a request a bash-only session (Options.BashOnly)
// does not serve.
var ErrBashOnly = errors.New("bash-only session")

// bash runs a: as it is (send) for a process-scoped backend, wrapped for a
// command-scoped one (sent, or run here in a bash-only session).
func (s *Session) bash(ctx context.Context, a wire.BashArgs, send func(wire.BashArgs) (*wire.BashResult, error), onOutput func(string, []byte)) (*wire.BashResult, error) {
	if s.wrapper == nil {
		// What the workspace watcher removed while the command ran (the
		// command's own plants among it), or since the last result, is in
		// its result.
		res, err := send(a)
		if err == nil {
			s.watcher.into(res)
		}
		return res, err
	}
	if s.local != nil && (a.Interactive || a.TTY != nil) {
		return nil, fmt.Errorf("broker: %w: a bash-only session runs no interactive commands", ErrBashOnly)
	}
	// Command-scoped: wrap it, and send the wrapper as the command (or
	// run it here, in a bash-only session).
	endWrap := trace.From(ctx).Begin("  wrap (protected paths, argv)")
	dir, err := s.resolveDir(a.Cwd)
	if err != nil {
		return nil, err
	}
	env := slices.Clone(s.env)
	for k, v := range a.Env {
		env = append(env, k+"="+v)
	}
	// What exists right now, resolved without following links (a link the
	// last command planted must not make the daemon mount its target).
	prot, err := fsguard.PlanProtection(s.opts.Workspace, s.opts.Config.Files.Protected)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	c := sandbox.Command{
		ID:         newID(),
		Shell:      a.Command,
		Workspace:  s.opts.Workspace,
		Dir:        dir,
		Env:        env,
		Mode:       s.opts.Config.Sandbox.Mode,
		Limits:     s.opts.Config.Sandbox.Limits,
		Protection: prot,
		Network:    s.opts.Network,
		AgentHome:  s.agentHome,
	}
	var argv []string
	var run sandbox.RunFunc
	if r, ok := s.wrapper.(sandbox.Runner); ok && s.local != nil && !a.Interactive {
		// The backend runs the command from this process (docker: the
		// Engine API instead of the CLI); nil means it cannot here.
		run, err = r.Runner(c)
	}
	switch {
	case err != nil || run != nil:
	case a.Interactive:
		iw, ok := s.wrapper.(sandbox.InteractiveWrapper)
		if !ok {
			return nil, sandbox.CheckInteractive(s.opts.Backend)
		}
		argv, err = iw.WrapInteractive(c, a.TTY != nil)
	default:
		argv, err = s.wrapper.Wrap(c)
	}
	endWrap()
	if err != nil {
		return nil, err
	}
	defer trace.From(ctx).Begin("  wrapped command")()
	var res *wire.BashResult
	if run != nil {
		var emit func(string, []byte)
		if a.Stream {
			emit = onOutput
		}
		a.Command, a.Cwd, a.Env = "", "", nil
		res, err = s.local.BashRun(ctx, a, run, emit)
	} else if s.local != nil {
		var emit func(string, []byte)
		if a.Stream {
			emit = onOutput
		}
		a.Command, a.Cwd, a.Env = "", "", nil
		res, err = s.local.BashArgv(ctx, argv, a, emit)
	} else {
		a.Command, a.Cwd, a.Env = shellquote.Join(argv), "", nil
		if a.Interactive {
			// The wrapper replaces the worker's sh -c: signals for the
			// command go to the wrapper's process alone, which forwards
			// them (sandbox.InteractiveWrapper), not to a shell around it.
			a.Command = "exec " + a.Command
		}
		res, err = send(a)
	}
	if err != nil || res.TimedOut || res.Canceled {
		// The docker CLI is dead but its container may not be.
		rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if rerr := s.wrapper.Remove(rctx, c.ID); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err == nil {
		// The wrapper's own failure (docker run's 125): if the backend went
		// away, fail closed loudly.
		if perr := s.wrapper.WrapperFailed(ctx, res.ExitCode); perr != nil {
			return nil, perr
		}
	}
	return res, err
}

// resolveDir checks a working directory for the docker backend.
func (s *Session) resolveDir(cwd string) (string, error) {
	ws := s.opts.Workspace
	p := cwd
	if p == "" {
		return ws, nil
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(ws, p)
	}
	p = filepath.Clean(p)
	real, err := filepath.EvalSymlinks(p)
	if err != nil || !paths.Within(ws, p) || !paths.Within(ws, real) {
		return "", &wire.Error{Code: wire.CodeOutside, Message: fmt.Sprintf("cwd %q is outside the workspace or does not exist", cwd)}
	}
	return real, nil
}

// Close ends the worker (and with the landlock backend every process of the
// sandbox) and removes the private temp dir.
func (s *Session) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if s.client != nil {
		start := time.Now()
		var outputEnd chan time.Time
		if s.tr != nil {
			// When the worker's output ended (its stage 2, or the worker
			// itself, exited) vs when the process was reaped: for landlock
			// the difference is stage 1's exit, which takes the sandbox's
			// remaining processes and namespaces down.
			outputEnd = make(chan time.Time, 1)
			go func() {
				<-s.client.Done()
				outputEnd <- time.Now()
			}()
		}
		err = s.client.Close(ctx)
		s.tr.Add("  worker exit", start, time.Now())
		if outputEnd != nil {
			out := <-outputEnd
			s.tr.Add("    worker output closed", start, out)
			s.tr.Add("    worker reaped (landlock: stage 1's exit, the namespaces torn down)", out, time.Now())
		}
	}
	end := s.tr.Begin("  temp dir and backend cleanup")
	s.cleanup()
	end()
	s.watcher.stop()
	s.watcher = nil
	if s.baseline != nil && s.swept == nil {
		start := time.Now()
		// Every process of the sandbox is gone now (it ended with the
		// worker): sweep against the workspace as it was before the
		// session.
		s.swept = &wire.BashResult{}
		if _, serr := s.baseline.Sweep(s.opts.Workspace, s.opts.Config.Files.Protected, s.swept); serr != nil {
			s.swept.TripwireWarnings = append(s.swept.TripwireWarnings, serr.Error())
		}
		name := "  workspace sweep"
		if pid, ok := s.baseline.Keeper(); ok {
			name += fmt.Sprintf(" (keeper: answered by pid %d)", pid)
		} else if st, ok := s.baseline.LedgerStats(); ok {
			name += " (ledger: " + describeLedger(st) + ")"
		}
		s.baseline.Close()
		s.tr.Add(name, start, time.Now())
		s.startKeeper(s.baseline)
	}
	if s.planState != nil {
		s.startKeeper(s.planState)
		s.planState = nil
	}
	return err
}

// startKeeper starts a keeper of the workspace for the next runs
// (package keeper) where state's ledger found it large enough and no
// keeper answered. A keeper only saves time: one that cannot start is
// recorded in the trace, no error.
func (s *Session) startKeeper(state *worker.TripwireState) {
	if !state.WantsKeeper() {
		return
	}
	start := time.Now()
	pid, err := keeper.Start(s.exe, s.opts.Workspace)
	name := fmt.Sprintf("  workspace keeper started for the next runs (pid %d)", pid)
	switch {
	case err != nil:
		name = "  workspace keeper not started: " + err.Error()
	case pid == 0:
		name = "  workspace keeper already starting"
	}
	s.tr.Add(name, start, time.Now())
}

// Swept reports what the sweep at Close removed or cleared (nil before
// Close, or for backends that need none).
func (s *Session) Swept() *wire.BashResult { return s.swept }

func (s *Session) cleanup() {
	if s.lifeline != nil {
		s.lifeline.Close()
	}
	if s.lifeR != nil {
		s.lifeR.Close()
	}
	if s.tempDir != "" {
		os.RemoveAll(s.tempDir)
	}
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// lifelineFD is a command-scoped worker's descriptor of its lifeline: the
// extra file after the spec pipe.
const lifelineFD = 4

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// newID returns a random identifier for a command run.
func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(errors.New("crypto/rand failed"))
	}
	return hex.EncodeToString(b[:])
}

// CleanStale removes what a killed broker could leave behind: private temp
// dirs of this user whose broker process no longer exists, and what the
// given backends left (sandbox.StaleCleaner: the landlock backend's empty
// cgroups, as root). It returns what it removed.
func CleanStale(backends ...sandbox.Backend) []string {
	var removed []string
	dir := os.TempDir()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, TempPrefix) {
			continue
		}
		pidStr, _, ok := strings.Cut(strings.TrimPrefix(name, TempPrefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || processAlive(pid) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Lstat(p); err != nil || !ownedByMe(fi) {
			continue
		}
		if os.RemoveAll(p) == nil {
			removed = append(removed, p)
		}
	}
	for _, b := range backends {
		if c, ok := b.(sandbox.StaleCleaner); ok {
			removed = append(removed, c.CleanStale(processAlive)...)
		}
	}
	return removed
}
