package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/agentnet"
	"vak/internal/config"
	"vak/internal/mcp"
	"vak/internal/paths"
)

func (a *app) agentnetDir() (string, error) {
	state, err := paths.StateDir()
	if err != nil {
		return "", exit(ExitFailure, err)
	}
	return agentnet.Dir(state), nil
}

func (a *app) newAgentnetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agentnet",
		Short: "The brokered workspace network (see docs/agent-network.md)",
	}
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the per-user agent network broker on its unix socket",
		Long: `Run the broker of the workspace network on <state>/agentnet/agentnet.sock
(directory 0700, socket 0600; connections from another uid are refused).
Policies come from [agent_network] in the trusted user config; SIGHUP or
'vak agentnet reload' re-reads them and closes edges that went down.
Receipts go to <state>/agentnet/receipts.jsonl, signed with the key in
<state>/agentnet/receipts-key.

You rarely run it yourself: vak mcp and vak run in a workspace with an
enabled policy start it on demand (detached, output in
<state>/agentnet/broker.log, pid in <state>/agentnet/broker.pid). One broker
runs per user: a second one exits with "already running".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := a.agentnetDir()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			load := func() ([]agentnet.Policy, error) {
				cfg, err := a.loadConfig("")
				if err != nil {
					return nil, err
				}
				return agentnet.PoliciesFromConfig(cfg.AgentNetwork), nil
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go func() {
				for range hup {
					if err := agentnet.NewClient(dir).Reload(ctx); err != nil {
						a.warnf("agentnet reload: %v", err)
					}
				}
			}()
			err = agentnet.Run(ctx, agentnet.RunOptions{Dir: dir, UID: os.Getuid(), Policies: load, PolicyFile: a.policyFile(),
				Ready: func(s string) { fmt.Fprintf(a.stdio.Err, "vak: agentnet broker listening on %s\n", s) }})
			return exitFor(err)
		},
	}
	edges := &cobra.Command{
		Use:   "edges",
		Short: "Show every edge the policies name, whether it is up, and why",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := a.agentnetDir()
			if err != nil {
				return err
			}
			es, err := agentnet.NewClient(dir).Edges(cmd.Context())
			if err != nil {
				return exitFor(err)
			}
			tw := tabwriter.NewWriter(a.stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKSPACE A\tWORKSPACE B\tSTATE\tWHY")
			for _, e := range es {
				st := "down"
				if e.Up {
					st = "up"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.A, e.B, st, e.Reason)
			}
			return tw.Flush()
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke WORKSPACE",
		Short: "Revoke a workspace's task tokens and close its edges at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := a.agentnetDir()
			if err != nil {
				return err
			}
			n, err := agentnet.NewClient(dir).Revoke(cmd.Context(), args[0])
			if err != nil {
				return exitFor(err)
			}
			fmt.Fprintf(a.stdio.Out, "revoked %d task(s) of %s\n", n, args[0])
			return nil
		},
	}
	reload := &cobra.Command{
		Use:   "reload",
		Short: "Make the running broker re-read [agent_network] (edges that went down close)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := a.agentnetDir()
			if err != nil {
				return err
			}
			return exitFor(agentnet.NewClient(dir).Reload(cmd.Context()))
		},
	}
	cmd.AddCommand(serve, edges, revoke, reload)
	return cmd
}

// policyFile names the user config the broker's policies come from (the
// --config file, or the default one), for its refused registrations.
func (a *app) policyFile() string {
	if a.userConfig != "" {
		if f, err := filepath.Abs(a.userConfig); err == nil {
			return f
		}
		return a.userConfig
	}
	if f, err := paths.UserConfigFile(); err == nil {
		return f
	}
	return ""
}

// agentNetRefresh is how often `vak mcp` re-checks its agent network
// registration (token renewal, edges coming up or going down).
const agentNetRefresh = 2 * time.Second

// agentNetPolicy reports whether the trusted config has an enabled policy
// for ws and the project config did not disable it.
func agentNetPolicy(cfg *config.Config, ws string) bool {
	if cfg.AgentNetwork.ProjectDisabled {
		return false
	}
	return slices.ContainsFunc(cfg.AgentNetwork.Workspaces, func(w config.AgentNetworkWorkspace) bool {
		c, err := agentnet.Canonical(w.Path)
		return err == nil && c == ws && w.Enabled
	})
}

// agentNetEnsure returns the function that starts the broker on demand:
// this vak binary as `vak agentnet serve` (with the same --config),
// detached, logging to <state>/agentnet/broker.log.
func (a *app) agentNetEnsure(dir string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := agentnet.Ensure(ctx, dir, func() (*exec.Cmd, error) {
			bin := workerExecutable
			if bin == "" {
				var err error
				if bin, err = os.Executable(); err != nil {
					return nil, fmt.Errorf("agentnet: find the vak binary: %w", err)
				}
			}
			var args []string
			if a.userConfig != "" {
				// Absolute: the broker runs in its state dir.
				cf, err := filepath.Abs(a.userConfig)
				if err != nil {
					return nil, fmt.Errorf("agentnet: --config %s: %w", a.userConfig, err)
				}
				args = append(args, "--config", cf)
			}
			return exec.Command(bin, append(args, "agentnet", "serve")...), nil
		})
		return err
	}
}

// agentNetTask registers a task of ws with the broker (started on demand)
// when the trusted config has an enabled policy for it and the project
// config did not disable it, and keeps it registered (token renewal,
// re-registration with a restarted broker) until ctx ends. It returns nil
// otherwise, or, warning why, when the broker cannot be reached. The token
// stays in this process: nothing of it reaches the sandbox.
func (a *app) agentNetTask(ctx context.Context, cfg *config.Config, ws string) *agentnet.Task {
	if !agentNetPolicy(cfg, ws) {
		return nil
	}
	dir, err := a.agentnetDir()
	if err != nil {
		a.warnf("agent network unavailable: %v", err)
		return nil
	}
	t := &agentnet.Task{Client: agentnet.NewClient(dir), Workspace: ws, Ensure: a.agentNetEnsure(dir)}
	if _, err := t.Register(ctx); err != nil {
		t.Client.Close()
		a.warnf("agent network unavailable: %v", err)
		return nil
	}
	go t.Watch(ctx, agentNetRefresh, nil, nil)
	return t
}

// attachAgentNet registers the MCP server's workspace with the agentnet
// broker (started on demand) when the trusted config has an enabled policy
// for it and the project config did not disable it. Without a broker the
// server runs without the agent_network tool (a warning says why).
func (a *app) attachAgentNet(ctx context.Context, srv *mcp.Server, cfg *config.Config, ws string, log *slog.Logger) {
	if cfg.AgentNetwork.ProjectDisabled {
		log.Info("agent network disabled by the project config")
		return
	}
	if !agentNetPolicy(cfg, ws) {
		return
	}
	dir, err := a.agentnetDir()
	if err != nil {
		log.Warn("agent network unavailable", "err", err)
		return
	}
	if err := srv.AttachAgentNet(ctx, agentnet.NewClient(dir), a.agentNetEnsure(dir)); err != nil {
		log.Warn("agent network unavailable", "err", err)
		return
	}
	go srv.WatchAgentNet(ctx, agentNetRefresh)
}
