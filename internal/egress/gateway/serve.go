package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"vak/internal/egress/egressconfig"
	"vak/internal/egress/ondemand"
	"vak/internal/egress/proxy"
	"vak/internal/errclass"
	"vak/internal/netfence"
	"vak/internal/paths"
)

// CanaryFile, in the gateway's state dir, records what reached the fence
// self-test canary directly.
const CanaryFile = "fence-canary.log"

// ServeOptions configure Serve: the gateway's Options (Load, StateDir and
// the listeners set; Logf and HandleSIGHUP are Serve's) and what only the
// `vak gateway` process has.
type ServeOptions struct {
	Options
	// Canary, if set, is the fence self-test canary's address (TCP and
	// UDP); what reaches it is recorded in CanaryFile of the state dir.
	Canary string
	// Procs is the process's GOMAXPROCS (SetProcs).
	Procs int
	// Out receives the gateway's log and what it serves once it started.
	Out io.Writer
}

// Serve is `vak gateway`: it starts the gateway, writes its session,
// listeners, CA and receipts log to o.Out and runs it until ctx ends or
// SIGINT or SIGTERM arrives; SIGHUP reloads. A configuration that does not
// load is of class errclass.Config, a gateway that cannot start (the
// canary included) errclass.Unavailable, a bad o.Procs errclass.Invalid.
// An empty o.StateDir is vak's own (made if missing; errclass.Internal when
// it cannot be).
func Serve(ctx context.Context, o ServeOptions) error {
	if err := defaultStateDir(&o.StateDir); err != nil {
		return err
	}
	if o.Canary != "" {
		c, err := netfence.ListenCanary(o.Canary, filepath.Join(o.StateDir, CanaryFile))
		if err != nil {
			return errclass.Wrap(errclass.Unavailable, fmt.Errorf("gateway: %w", err))
		}
		defer c.Close()
	}
	o.HandleSIGHUP = true
	o.Logf = func(format string, args ...any) {
		fmt.Fprintf(o.Out, "vak gateway: "+format+"\n", args...)
	}
	g, err := start(o.Options)
	if err != nil {
		return err
	}
	if _, err := SetProcs(o.Procs); err != nil {
		g.Close()
		return errclass.Wrap(errclass.Invalid, err)
	}
	st := g.Status().(Status)
	ad := g.Addrs()
	fmt.Fprintf(o.Out, "vak gateway: session %s, %d rule(s), %d secret(s)\n", st.Session, st.Rules, len(st.Secrets))
	for _, l := range [][2]string{{"proxy", ad.Proxy}, {"transparent", ad.Transparent}, {"dns", ad.DNS}, {"admin", ad.Admin}} {
		if l[1] != "" {
			fmt.Fprintf(o.Out, "vak gateway: %-11s %s\n", l[0], l[1])
		}
	}
	fmt.Fprintf(o.Out, "vak gateway: CA %s (sha256 %s)\nvak gateway: receipts %s\n", st.CACertFile, st.CAFingerprint, st.ReceiptsFile)
	return runUntilSignal(ctx, g)
}

// OnDemandOptions configure ServeOnDemand.
type OnDemandOptions struct {
	// Load and ConfigFile are Options'.
	Load       func() (*egressconfig.Config, error)
	ConfigFile string
	// StateDir is vak's state dir (the on-demand directory is in it:
	// ondemand.Layout).
	StateDir string
	// Idle is how long the gateway stays up with no run holding it.
	Idle time.Duration
	// Out receives the gateway's log, timestamped.
	Out io.Writer
}

// ServeOnDemand is `vak gateway serve-native`: the gateway of native
// proxied runs, with its transparent and DNS listeners on unix sockets of
// the on-demand directory and no TCP listener at all, until it has been
// idle (no run holding its lease) for o.Idle, ctx ends, or SIGINT or
// SIGTERM arrives (vak gc). Errors are classed as Serve's; an empty
// o.StateDir is vak's own, as in Serve.
func ServeOnDemand(ctx context.Context, o OnDemandOptions) error {
	if err := defaultStateDir(&o.StateDir); err != nil {
		return err
	}
	p := ondemand.Layout(o.StateDir)
	g, err := start(Options{
		Load:              o.Load,
		ConfigFile:        o.ConfigFile,
		StateDir:          o.StateDir,
		Listen:            "-",
		TransparentListen: UnixPrefix + p.Data,
		TransparentMode:   proxy.ProxyProtocol,
		DNSListen:         UnixPrefix + p.DNS,
		AdminSocket:       p.Admin,
		HandleSIGHUP:      true,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(o.Out, "%s vak gateway: "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339)}, args...)...)
		},
	})
	if err != nil {
		return err
	}
	if err := ondemand.WritePID(p); err != nil {
		g.Close()
		return err
	}
	st := g.Status().(Status)
	fmt.Fprintf(o.Out, "vak gateway: on-demand session %s, %d rule(s), %d secret(s); sockets in %s; stops after %v unused\n", st.Session, st.Rules, len(st.Secrets), p.Dir, o.Idle)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		poll := min(max(o.Idle/4, 10*time.Millisecond), 5*time.Second)
		if ondemand.WaitIdle(ctx, p, o.Idle, poll) != nil {
			// The lease stays locked until this process exits.
			fmt.Fprintf(o.Out, "vak gateway: unused for %v, stopping\n", o.Idle)
			cancel()
		}
	}()
	return runUntilSignal(ctx, g)
}

// start is New with its error classed: errclass.Config when the
// configuration is invalid, else errclass.Unavailable.
func start(o Options) (*Gateway, error) {
	g, err := New(o)
	if err == nil {
		return g, nil
	}
	if errors.Is(err, egressconfig.ErrInvalid) {
		return nil, errclass.Wrap(errclass.Config, err)
	}
	// A config.ErrInvalid from Load keeps its class Config.
	return nil, errclass.Wrap(errclass.Unavailable, err)
}

// runUntilSignal runs g until ctx ends or SIGINT or SIGTERM arrives.
func runUntilSignal(ctx context.Context, g *Gateway) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return g.Run(ctx)
}

// defaultStateDir sets *dir to vak's state dir (made if missing) when it
// is empty.
func defaultStateDir(dir *string) error {
	if *dir != "" {
		return nil
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return errclass.Wrap(errclass.Internal, err)
	}
	*dir = state
	return nil
}
