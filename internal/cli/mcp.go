package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/errclass"
	"vak/internal/hostenv"
	"vak/internal/launch"
	"vak/internal/mcp"
	"vak/internal/sandbox"
	"vak/internal/taskenv"
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
	req.Planted = func(res *wire.BashResult) { logPlanted(log, res) }
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
		var done func()
		if sessionID, start, done, err = a.mcpSessionWorker(sigctx, f, cfg, ws, start, log); err != nil {
			return err
		}
		defer done()
	}
	srv, err := mcp.New(mcp.Options{
		Workspace:  ws,
		Mode:       cfg.Sandbox.Mode,
		MaxTimeout: cfg.Sandbox.Timeout,
		Session:    sessionID,
		Version:    Version,
		Log:        log,
		Start:      start,
	})
	if err != nil {
		return exit(ExitInternal, err)
	}
	defer srv.Close()
	// The sandbox starts now: a backend that cannot start fails the server
	// here, with the reason, rather than every tool call.
	if err := srv.Warm(sigctx); err != nil {
		return exit(ExitUnavailable, fmt.Errorf("sandbox backend %s: %w", b.Name(), err))
	}
	a.attachAgentNet(sigctx, srv, cfg, ws, log)
	return a.serveMCP(sigctx, srv, f.listen, log, "workspace", ws, "backend", b.Name(), "mode", cfg.Sandbox.Mode.String(), "tools", strings.Join(srv.Tools(), ","))
}

// serveMCP serves srv on stdio, or on streamable HTTP at listen, until ctx
// ends; what is logged at start gets attrs.
func (a *app) serveMCP(ctx context.Context, srv *mcp.Server, listen string, log *slog.Logger, attrs ...any) error {
	if listen != "" {
		l, err := mcp.Listen(listen)
		if err != nil {
			return exit(ExitUsage, err)
		}
		log.Info("serving MCP over streamable HTTP", append([]any{"url", l.URL, "socket", l.Socket}, attrs...)...)
		// The token is printed once, here, and never logged.
		fmt.Fprintf(a.stdio.Out, "url: %s\n", l.URL)
		if l.Socket != "" {
			fmt.Fprintf(a.stdio.Out, "socket: %s\n", l.Socket)
		} else {
			fmt.Fprintf(a.stdio.Out, "authorization: Bearer %s\n", l.Token)
		}
		if err := mcp.ServeHTTP(ctx, l, srv.HTTPHandler(l)); err != nil {
			return exit(ExitFailure, fmt.Errorf("mcp: %w", err))
		}
		return nil
	}
	log.Info("serving MCP on stdio", attrs...)
	if err := srv.ServeStdio(ctx, a.stdio.In, a.stdio.Out); err != nil {
		if errors.Is(err, errclass.Unavailable) {
			return exit(ExitUnavailable, err)
		}
		return exit(ExitFailure, fmt.Errorf("mcp: %w", err))
	}
	return nil
}

// mcpSessionWorker is the worker of `vak mcp --session ID` or
// --session-new (created here, removed by done): bash runs in the
// session's container, the file tools stay with files. It fails early on a
// wrong ID or workspace, not at the first call.
func (a *app) mcpSessionWorker(ctx context.Context, f mcpFlags, cfg *config.Config, ws string, files mcp.StartFunc, log *slog.Logger) (_ string, _ mcp.StartFunc, _ func(), err error) {
	m, err := a.manager(cfg, &sessionFlags{labels: f.labels})
	if err != nil {
		return "", nil, nil, err
	}
	// cleanup ends what was made here: by the caller, or on error.
	cleanup := func() { m.Close() }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	id := f.session
	if f.sessionNew {
		if id, err = a.mcpSession(ctx, m, cfg, ws); err != nil {
			return "", nil, nil, exitFor(err)
		}
		log.Info("created task-environment session; it is removed when the server exits", "session", id)
		cleanup = func() {
			rmctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := m.Discard(rmctx, id); err != nil {
				log.Error("remove the session", "session", id, "err", err)
			}
			m.Close()
		}
	}
	open := func(ctx context.Context) (*taskenv.Session, error) {
		s, err := m.Open(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", id, err)
		}
		if s.Workspace() != ws {
			s.Close()
			return nil, fmt.Errorf("session %s belongs to workspace %s, not %s", id, s.Workspace(), ws)
		}
		return s, nil
	}
	s, err := open(ctx)
	if err != nil {
		return "", nil, nil, exitFor(err)
	}
	s.Close()
	return id, mcp.SessionWorker(files, open), cleanup, nil
}

// mcpClients are the clients --print-config knows.
var mcpClients = []string{"claude", "codex", "cursor", "gemini"}

// printMCPConfig prints the snippet that registers this server in client.
func (a *app) printMCPConfig(f mcpFlags, ws string) error {
	exe, err := os.Executable()
	if err != nil {
		return exit(ExitInternal, fmt.Errorf("find the vak binary: %w", err))
	}
	args := []string{"mcp", "--workspace", ws}
	if a.userConfig != "" {
		args = append([]string{"--config", a.userConfig}, args...)
	}
	for _, fl := range []struct{ name, v string }{{"--backend", f.backend}, {"--mode", f.mode}, {"--network", f.network}, {"--image", f.image}, {"--home", f.home}} {
		if fl.v != "" {
			args = append(args, fl.name, fl.v)
		}
	}
	if f.timeout > 0 {
		args = append(args, "--timeout", f.timeout.String())
	}
	if f.session != "" {
		args = append(args, "--session", f.session)
	}
	if f.sessionNew {
		args = append(args, "--session-new")
	}
	out := a.stdio.Out
	switch f.printConfig {
	case "codex":
		// ~/.codex/config.toml; TOML basic strings use JSON's escapes.
		q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		qs := make([]string, len(args))
		for i, s := range args {
			qs[i] = q(s)
		}
		fmt.Fprintf(out, "# ~/.codex/config.toml\n[mcp_servers.vak]\ncommand = %s\nargs = [%s]\n", q(exe), strings.Join(qs, ", "))
	case "claude", "cursor", "gemini":
		where := map[string]string{
			"claude": "# .mcp.json in the project (or: claude mcp add-json vak '<the vak object>')",
			"cursor": "# .cursor/mcp.json in the project (or ~/.cursor/mcp.json)",
			"gemini": "# .gemini/settings.json in the project (or ~/.gemini/settings.json)",
		}[f.printConfig]
		server := map[string]any{"command": exe, "args": args}
		if f.printConfig == "claude" {
			server["type"] = "stdio"
		}
		data, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"vak": server}}, "", "  ")
		fmt.Fprintf(a.stdio.Err, "%s\n", where)
		fmt.Fprintf(out, "%s\n", data)
	default:
		return exit(ExitUsage, fmt.Errorf("--print-config %q: want one of %s", f.printConfig, strings.Join(mcpClients, ", ")))
	}
	return nil
}

// mcpSession creates the session of `vak mcp --session-new`: as `vak
// session create` would, with a task name of its own.
func (a *app) mcpSession(ctx context.Context, m *taskenv.Manager, cfg *config.Config, ws string) (string, error) {
	if !cfg.Sandbox.Mode.Restricted() {
		return "", exit(ExitUsage, fmt.Errorf("mode %s: a session is a sandbox (use read-only or workspace-write)", cfg.Sandbox.Mode))
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	spec := taskenv.Spec{
		Task:           "mcp-" + hex.EncodeToString(rnd[:]),
		Workspace:      ws,
		BaseImage:      cfg.Sandbox.Image,
		Limits:         cfg.Sandbox.Limits,
		Mode:           cfg.Sandbox.Mode,
		Env:            hostenv.Lookup(m.EnvAllowlist),
		Protected:      cfg.Files.Protected,
		DefaultTimeout: cfg.Sandbox.Timeout,
		NetworkPolicy:  cfg.Network,
	}
	s, err := m.Create(ctx, spec)
	if err != nil {
		if spec.NetworkPolicy == sandbox.NetworkProxied {
			a.releaseProxyNet(context.Background(), ws)
		}
		return "", err
	}
	id := s.ID()
	s.Close()
	return id, nil
}

// logPlanted logs what a session's workspace watcher removed or cleared
// while the session ran (broker.Options.Planted), one warning per entry.
func logPlanted(log *slog.Logger, res *wire.BashResult) {
	for _, p := range res.ProtectedRemoved {
		log.Warn("removed a protected path planted in the workspace while the session ran (it would run outside the sandbox)", "path", p)
	}
	for _, p := range res.SetuidCleared {
		log.Warn("cleared the setuid or setgid bits of a file in the workspace", "file", p)
	}
	for _, w := range res.TripwireWarnings {
		log.Warn("workspace watcher", "warning", w)
	}
}
