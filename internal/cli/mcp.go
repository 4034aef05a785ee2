package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"vak/internal/broker"
	"vak/internal/errclass"
	"vak/internal/launch"
	"vak/internal/mcp"
	"vak/internal/version"
	"vak/internal/worker/wire"
)

type mcpFlags struct {
	runFlags
	printConfig string
	session     string
	sessionNew  bool
	listen      string
	labels      []string // hidden: labels of a --session-new container (tests)
}

func (a *app) newMCPCmd() *cobra.Command {
	var f mcpFlags
	cmd := &cobra.Command{
		Use:   "mcp [flags]",
		Short: "Serve the sandboxed tools to an agent over MCP (stdio)",
		Long: `Serve vak's tools as a Model Context Protocol server on stdin/stdout, so
that an agent that keeps its own loop (Claude Code, Codex, Cursor, Gemini CLI)
runs its commands in vak's sandbox.

Tools: bash (runs in the sandbox, as vak run does), read_file, write_file,
edit_file, glob, grep (on the host, confined to the workspace, protected paths
read-only). In read-only mode write_file and edit_file are not offered. One
sandbox worker serves all calls; it starts with the first call and is
restarted if it dies. Diagnostics go to stderr; stdout is the protocol.

With --session ID (or --session-new, which creates a session for this server
and removes it at exit) bash runs in that task-environment container, so what
one call installs the next finds; the file tools stay on the host.

--print-config CLIENT prints the configuration snippet that registers this
server (with the other flags given) in claude, codex, cursor or gemini, and
exits. See docs/mcp.md.

With --listen the server speaks streamable HTTP instead: on a loopback
HOST:PORT every request needs the bearer token printed at start (401
otherwise); on unix:PATH the socket is mode 0600 and a peer of another uid is
refused (403).`,
		Example: `  vak mcp --workspace ~/src/app
  vak mcp --workspace ~/src/app --print-config codex >> ~/.codex/config.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.mcp(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.workspace, "workspace", "w", "", "workspace directory (default: current directory)")
	fl.StringVar(&f.mode, "mode", "", "sandbox mode: read-only, workspace-write or full-access (default from config: workspace-write)")
	fl.StringVar(&f.backend, "backend", "", "sandbox backend: auto, landlock, seatbelt, docker or none (default from config: auto)")
	fl.StringVar(&f.image, "image", "", "container image for the docker backend (default from config)")
	fl.DurationVar(&f.timeout, "timeout", 0, "the longest a bash call may run (default from config: none; a call without a timeout gets 2m)")
	fl.StringVar(&f.network, "network", "", "network policy: none or proxied (default from config: none)")
	homeFlag(fl, &f.home)
	fl.StringVar(&f.listen, "listen", "", "serve streamable HTTP instead of stdio: a loopback HOST:PORT (a bearer token is generated and printed) or unix:PATH (only your uid may connect)")
	fl.StringVar(&f.session, "session", "", "run bash in this task-environment session (vak session create); the file tools stay on the host")
	fl.BoolVar(&f.sessionNew, "session-new", false, "create a task-environment session for this server, run bash in it, and remove it when the server exits")
	fl.StringArrayVar(&f.labels, "label", nil, "extra label KEY=VALUE on a --session-new container")
	fl.MarkHidden("label")
	fl.StringVar(&f.printConfig, "print-config", "", "print the MCP configuration for a client (claude, codex, cursor, gemini) and exit")
	return cmd
}

func (a *app) mcp(ctx context.Context, f mcpFlags) error {
	ws, cfg, err := a.workspaceConfig(f.runFlags)
	if err != nil {
		return err
	}
	if f.printConfig != "" {
		return a.printMCPConfig(f, ws)
	}
	if f.session != "" && f.sessionNew {
		return exit(ExitUsage, errors.New("--session and --session-new exclude each other"))
	}
	sessionMode := f.session != "" || f.sessionNew
	log := slog.New(slog.NewTextHandler(a.stdio.Err, nil)).With("component", "vak-mcp")
	req := a.launchRequest(ws, cfg)
	// The server starts (and restarts) its worker on demand; a session has
	// its own network.
	req.Deferred, req.NoNetwork = true, sessionMode
	req.Planted = func(res *wire.BashResult) { mcp.LogPlanted(log, res) }
	req.Interrupts = func(ctx context.Context) (context.Context, func()) {
		return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	}
	r, err := launch.Start(ctx, req)
	if err != nil {
		return startErr(err)
	}
	// Held while the server runs: its workers' containers come and go.
	defer r.Close()
	sigctx, b := r.Context, r.Backend
	start := mcp.BrokerWorker(func(ctx context.Context) (*broker.Session, error) {
		s, err := r.StartBroker(ctx)
		if err == nil {
			log.Info("sandbox worker started", "backend", b.Name(), "sandbox", s.Ready().Sandbox)
		}
		return s, err
	})
	sessionID := f.session
	if sessionMode {
		m, err := a.manager(cfg, &sessionFlags{labels: f.labels})
		if err != nil {
			return err
		}
		s, err := launch.OpenMCPSession(sigctx, req, m, f.session, start, log)
		if err != nil {
			return exitFor(err)
		}
		defer s.Close()
		sessionID, start = s.ID, s.Start
	}
	srv, err := mcp.New(mcp.Options{Workspace: ws, Mode: cfg.Sandbox.Mode, MaxTimeout: cfg.Sandbox.Timeout,
		Session: sessionID, Version: version.Version, Log: log, Start: start, AskSocket: r.AskSocket})
	if err != nil {
		return exit(ExitInternal, err)
	}
	defer srv.Close()
	// The sandbox starts now: a backend that cannot start fails the server
	// here, with the reason, rather than every tool call.
	if err := srv.Warm(sigctx); err != nil {
		return exit(ExitUnavailable, fmt.Errorf("sandbox backend %s: %w", b.Name(), err))
	}
	a.agentNet().Attach(sigctx, srv, cfg, ws, log)
	err = srv.Serve(sigctx, f.listen, a.stdio.In, a.stdio.Out, "workspace", ws, "backend", b.Name(), "mode", cfg.Sandbox.Mode.String(), "tools", strings.Join(srv.Tools(), ","))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mcp.ErrListen):
		return exit(ExitUsage, err)
	case errors.Is(err, errclass.Unavailable):
		return exit(ExitUnavailable, err)
	}
	return exit(ExitFailure, fmt.Errorf("mcp: %w", err))
}

// printMCPConfig prints the snippet that registers this server, with the
// flags given, in the client --print-config names.
func (a *app) printMCPConfig(f mcpFlags, ws string) error {
	exe, err := os.Executable()
	if err != nil {
		return exit(ExitInternal, fmt.Errorf("find the vak binary: %w", err))
	}
	timeout := ""
	if f.timeout > 0 {
		timeout = f.timeout.String()
	}
	args := mcp.ServeArgs(a.userConfig, ws, f.sessionNew, "--backend", f.backend, "--mode", f.mode,
		"--network", f.network, "--image", f.image, "--home", f.home, "--timeout", timeout, "--session", f.session)
	where, snippet, err := mcp.ClientConfig(f.printConfig, exe, args)
	if err != nil {
		return exit(ExitUsage, err)
	}
	if where != "" {
		fmt.Fprintf(a.stdio.Err, "%s\n", where)
	}
	fmt.Fprint(a.stdio.Out, snippet)
	return nil
}
