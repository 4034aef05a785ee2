// Package launch is vak's one start sequence: resolve and probe the
// sandbox backend, attach the network the config asks for (the fence
// toward the on-demand gateway for a process-scoped backend, the
// workspace's Docker topology for a command-scoped one), and start the
// broker. `vak run`, `vak mcp` and task-environment sessions start
// through it (sessions attach their network through Topology); the
// command line only turns flags into a Request and prints the outcome.
// Around the start: AgentNet registers a run's or an MCP server's
// workspace on the agent network (the broker started on demand), and
// StopOnDemandGateway is vak gc's part for native proxied runs.
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/errclass"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/trace"
	"vak/internal/worker/wire"
)

var (
	// ErrUnavailable is wrapped by every Start error but ErrNotInteractive:
	// the backend, its network or its worker could not start, and nothing
	// ran (class errclass.Unavailable).
	ErrUnavailable = errclass.New(errclass.Unavailable, "nothing was run")
	// ErrNotInteractive is returned when the request asks for stdin or a
	// terminal (Request.Interactive, Request.TTY) and the backend runs no
	// interactive commands (class errclass.Invalid).
	ErrNotInteractive = errclass.New(errclass.Invalid, "nothing was run")
)

// Request is what one start needs: plain values, decided by the caller
// (the command line's flags and the config it loaded once).
type Request struct {
	// Workspace is the canonical workspace.
	Workspace string
	// Config is the loaded config with the caller's flags applied. Start
	// never loads or validates config again: its validated egress
	// sections (Config.Egress) are passed down as they are.
	Config *config.Config
	// Labels go on every container, network and volume the start creates
	// (tests: vak.test=1).
	Labels map[string]string
	// Executable is the vak binary re-executed as the worker and started
	// as the on-demand gateway; empty means this program.
	Executable string
	// UserConfig is the user config file the caller loaded (--config),
	// passed to the on-demand gateway; empty means the default.
	UserConfig string

	// Interactive and TTY are the caller's explicit wishes for stdin and
	// a terminal (TTY nil: no wish, a terminal when Terminal says the
	// caller has one and the backend can). An explicit wish the backend
	// cannot honour is ErrNotInteractive.
	Interactive bool
	TTY         *bool
	Terminal    bool
	// OneCommand: the run serves one command (vak run). Without an
	// interactive wish it is bash-only (broker.Options.BashOnly).
	OneCommand bool
	// Deferred: no broker is started; Run.StartBroker starts one per
	// worker (vak mcp starts and restarts its worker on demand).
	Deferred bool
	// NoNetwork: the commands run elsewhere (an MCP server's session has
	// its own network), so none is attached here.
	NoNetwork bool
	// NetworkIdle is how long the workspace's topology stays up after
	// Close (vak run: session.run_network_idle); zero removes it when
	// nothing uses it.
	NetworkIdle time.Duration
	// Planted receives what a long-lived session's workspace watcher
	// removed or cleared (broker.Options.Planted).
	Planted func(*wire.BashResult)

	// Interrupts, when set, is called once the backend is resolved and
	// probed: the context it returns governs the network and the broker
	// (signals that cancel it tear the run down), stop is called by Close.
	Interrupts func(context.Context) (ctx context.Context, stop func())
	// Warn receives warnings (a stale gateway, a failed release); nil
	// drops them. Progress receives image builds and set-up progress.
	Warn     func(string)
	Progress io.Writer
}

// Run is a started sandbox: its backend, network and broker session.
type Run struct {
	// Backend is the resolved and probed backend.
	Backend sandbox.Backend
	// Network is the attached network (nil: none).
	Network *sandbox.NetworkAttachment
	// AskSocket is the admin socket of the gateway that holds the run's
	// asks ([network] ask) when one can be reached from here: the
	// on-demand gateway of a native proxied run ("": none).
	AskSocket string
	// Session is the broker session (nil when Request.Deferred).
	Session *broker.Session
	// Interactive says whether the command runs interactively (stdin
	// forwarded), TTY whether on a terminal in the sandbox.
	Interactive, TTY bool
	// Context is the context of Request.Interrupts (or Start's).
	Context context.Context

	req      Request
	reg      *sandbox.Registry
	cleanups []func() // run by Close, last first
}

// Start resolves and probes the backend, attaches the network and (unless
// Deferred) starts the broker. Its errors wrap ErrUnavailable or
// ErrNotInteractive; on error nothing is left running.
func Start(ctx context.Context, req Request) (_ *Run, err error) {
	if req.Config == nil || req.Workspace == "" {
		return nil, errRequired
	}
	r := &Run{req: req, Context: ctx}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if err := r.resolve(ctx); err != nil {
		return nil, err
	}
	if req.Interrupts != nil {
		ictx, stop := req.Interrupts(ctx)
		r.Context = ictx
		r.defers(stop)
	}
	if err := r.attach(r.Context); err != nil {
		return nil, err
	}
	r.cleanStale()
	if req.Deferred {
		return r, nil
	}
	s, err := r.StartBroker(r.Context)
	if errors.Is(err, errclass.Unavailable) {
		return nil, fmt.Errorf("%w; %w", err, ErrUnavailable)
	} else if err != nil {
		return nil, fmt.Errorf("sandbox backend %s: %w; %w", r.Backend.Name(), err, ErrUnavailable)
	}
	r.Session = s
	r.defers(func() {
		defer trace.From(ctx).Begin("teardown")()
		s.Close()
	})
	return r, nil
}

// resolve picks the backend, probes it and checks the stdin wishes.
func (r *Run) resolve(ctx context.Context) error {
	defer trace.From(ctx).Begin("backend check")()
	cfg := r.req.Config
	r.reg = Registry(cfg, r.req.Labels)
	b, _, err := r.reg.Resolve(cfg.Sandbox.Backend, cfg.Sandbox.Mode)
	if err != nil {
		return fmt.Errorf("sandbox: %w; %w", err, ErrUnavailable)
	}
	if err := b.Available(ctx); err != nil {
		return fmt.Errorf("sandbox backend %s: %w; %w", b.Name(), err, ErrUnavailable)
	}
	if d, ok := b.(*docker.Backend); ok {
		// Before a gateway is started for a run that cannot use it.
		if err := d.CheckNetwork(cfg.Network == sandbox.NetworkProxied); err != nil {
			return errclass.Wrap(errclass.Config, err)
		}
	}
	r.Backend = b
	canInteract := sandbox.CheckInteractive(b)
	if r.req.Interactive || (r.req.TTY != nil && *r.req.TTY) {
		if canInteract != nil {
			return fmt.Errorf("-i/-t: %w; %w", canInteract, ErrNotInteractive)
		}
	}
	r.TTY = r.req.Terminal && canInteract == nil
	if r.req.TTY != nil {
		r.TTY = *r.req.TTY
	}
	r.Interactive = r.TTY || r.req.Interactive
	return nil
}

// StartBroker starts a broker session on the run's backend and network
// (Start does for a run that is not Deferred); its errors are the broker's.
func (r *Run) StartBroker(ctx context.Context) (*broker.Session, error) {
	return broker.Start(ctx, broker.Options{
		Config: r.req.Config, Workspace: r.req.Workspace, Backend: r.Backend, Labels: r.req.Labels,
		Executable: r.req.Executable, Network: r.Network, Planted: r.req.Planted,
		BashOnly: r.req.OneCommand && !r.Interactive, OneCommand: r.req.OneCommand,
	})
}

// cleanStale removes the leftovers of brokers that were killed (temp dirs,
// cgroups) while the run starts and runs (they belong to dead processes,
// never to this one); Close waits for it.
func (r *Run) cleanStale() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		broker.CleanStale(r.reg.All()...)
	}()
	tr := trace.From(r.Context)
	r.defers(func() {
		defer tr.Begin("stale cleanup (what is left of it at the end)")()
		<-done
	})
}

// Close stops the broker session, waits for the stale cleanup, lets go of
// the network and stops the interrupts, in that order. It returns what the
// session's last sweep of the workspace did (nil: nothing to report).
func (r *Run) Close() *wire.BashResult {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
	if r.Session != nil {
		return r.Session.Swept()
	}
	return nil
}

// defers adds f to what Close runs (last added, first run).
func (r *Run) defers(f func()) { r.cleanups = append(r.cleanups, f) }
