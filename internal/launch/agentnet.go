package launch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"vak/internal/agentnet"
	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/trace"
)

// AgentNetRefresh is how often a registration is re-checked (token
// renewal, edges coming up or going down).
const AgentNetRefresh = 2 * time.Second

// AgentNetEnabled reports whether the trusted config has an enabled agent
// network policy for ws and the project config did not disable it.
func AgentNetEnabled(cfg *config.Config, ws string) bool {
	if cfg.AgentNetwork.ProjectDisabled {
		return false
	}
	return slices.ContainsFunc(cfg.AgentNetwork.Workspaces, func(w config.AgentNetworkWorkspace) bool {
		c, err := agentnet.Canonical(w.Path)
		return err == nil && c == ws && w.Enabled
	})
}

// AgentNet is the user's agent network broker as vak run, vak mcp and
// `vak agentnet` reach it: in vak's state dir, started on demand as this
// vak binary's `vak agentnet serve` with the same user config.
type AgentNet struct {
	// UserConfig is the user config file (--config; empty: the default).
	UserConfig string
	// Executable is the vak binary that serves the broker (empty: this
	// one).
	Executable string
}

// Dir is the broker's directory (agentnet.Dir of vak's state dir).
func (n AgentNet) Dir() (string, error) {
	state, err := paths.StateDir()
	if err != nil {
		return "", err
	}
	return agentnet.Dir(state), nil
}

// client returns a client of the broker.
func (n AgentNet) client() (*agentnet.Client, error) {
	dir, err := n.Dir()
	if err != nil {
		return nil, err
	}
	return agentnet.NewClient(dir), nil
}

// PolicyFile names the user config the broker's policies come from (the
// --config file, or the default one), for its refused registrations.
func (n AgentNet) PolicyFile() string {
	if n.UserConfig != "" {
		if f, err := filepath.Abs(n.UserConfig); err == nil {
			return f
		}
		return n.UserConfig
	}
	if f, err := paths.UserConfigFile(); err == nil {
		return f
	}
	return ""
}

// Serve is `vak agentnet serve`: it serves the broker (agentnet.Serve) for
// this user with the policies load returns (at start and on every reload);
// ready is told the socket once it listens, warn a reload that failed.
func (n AgentNet) Serve(ctx context.Context, load func() ([]agentnet.Policy, error), ready, warn func(string)) error {
	dir, err := n.Dir()
	if err != nil {
		return err
	}
	return agentnet.Serve(ctx, agentnet.RunOptions{Dir: dir, UID: os.Getuid(), Policies: load, PolicyFile: n.PolicyFile(), Ready: ready}, warn)
}

// Edges is `vak agentnet edges`: the running broker's edges, as a table
// on w (agentnet.WriteEdges).
func (n AgentNet) Edges(ctx context.Context, w io.Writer) error {
	c, err := n.client()
	if err != nil {
		return err
	}
	es, err := c.Edges(ctx)
	if err != nil {
		return err
	}
	return agentnet.WriteEdges(w, es)
}

// Revoke is `vak agentnet revoke`: it revokes ws's task tokens and closes
// its edges, saying how many tasks on w.
func (n AgentNet) Revoke(ctx context.Context, ws string, w io.Writer) error {
	c, err := n.client()
	if err != nil {
		return err
	}
	k, err := c.Revoke(ctx, ws)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "revoked %d task(s) of %s\n", k, ws)
	return nil
}

// Reload is `vak agentnet reload`: the running broker re-reads its
// policies.
func (n AgentNet) Reload(ctx context.Context) error {
	c, err := n.client()
	if err != nil {
		return err
	}
	return c.Reload(ctx)
}

// Ensure returns the function that starts the broker in dir on demand:
// the vak binary as `vak agentnet serve` (with the same --config),
// detached, logging to agentnet.LogFile.
func (n AgentNet) Ensure(dir string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := agentnet.Ensure(ctx, dir, func() (*exec.Cmd, error) {
			bin := n.Executable
			if bin == "" {
				var err error
				if bin, err = os.Executable(); err != nil {
					return nil, fmt.Errorf("agentnet: find the vak binary: %w", err)
				}
			}
			var args []string
			if n.UserConfig != "" {
				// Absolute: the broker runs in its state dir.
				cf, err := filepath.Abs(n.UserConfig)
				if err != nil {
					return nil, fmt.Errorf("agentnet: --config %s: %w", n.UserConfig, err)
				}
				args = append(args, "--config", cf)
			}
			return exec.Command(bin, append(args, "agentnet", "serve")...), nil
		})
		return err
	}
}

// Task registers a task of ws with the broker (started on demand) when
// AgentNetEnabled, and keeps it registered (token renewal, re-registration
// with a restarted broker) until ctx ends. It returns nil otherwise, or,
// telling warn why, when the broker cannot be reached. The token stays in
// this process: nothing of it reaches the sandbox.
func (n AgentNet) Task(ctx context.Context, cfg *config.Config, ws string, warn func(string)) *agentnet.Task {
	if !AgentNetEnabled(cfg, ws) {
		return nil
	}
	dir, err := n.Dir()
	if err != nil {
		warn(fmt.Sprintf("agent network unavailable: %v", err))
		return nil
	}
	t := &agentnet.Task{Client: agentnet.NewClient(dir), Workspace: ws, Ensure: n.Ensure(dir)}
	if _, err := t.Register(ctx); err != nil {
		t.Client.Close()
		warn(fmt.Sprintf("agent network unavailable: %v", err))
		return nil
	}
	go t.Watch(ctx, AgentNetRefresh, nil, nil)
	return t
}

// AgentNetServer is the side of an MCP server (mcp.Server) that serves the
// agent_network tool.
type AgentNetServer interface {
	AttachAgentNet(ctx context.Context, client *agentnet.Client, ensure func(context.Context) error) error
	WatchAgentNet(ctx context.Context, interval time.Duration)
}

// Attach registers the MCP server's workspace ws with the broker (started
// on demand) when AgentNetEnabled, and keeps the registration until ctx
// ends. Without a broker the server runs without the agent_network tool
// (log says why).
func (n AgentNet) Attach(ctx context.Context, srv AgentNetServer, cfg *config.Config, ws string, log *slog.Logger) {
	if cfg.AgentNetwork.ProjectDisabled {
		log.Info("agent network disabled by the project config")
		return
	}
	if !AgentNetEnabled(cfg, ws) {
		return
	}
	dir, err := n.Dir()
	if err == nil {
		err = srv.AttachAgentNet(ctx, agentnet.NewClient(dir), n.Ensure(dir))
	}
	if err != nil {
		log.Warn("agent network unavailable", "err", err)
		return
	}
	go srv.WatchAgentNet(ctx, AgentNetRefresh)
}

// Hold registers workspace ws on the agent network for as long as a run
// lasts, when cfg enables it for ws (AgentNetEnabled); the returned function
// ends the registration (its token stays in this process, never in the
// sandbox). warn says why the broker could not be reached.
func (n AgentNet) Hold(ctx context.Context, cfg *config.Config, ws string, warn func(string)) (release func()) {
	if !AgentNetEnabled(cfg, ws) {
		return func() {}
	}
	defer trace.From(ctx).Begin("agent network")()
	anctx, anstop := context.WithCancel(ctx)
	task := n.Task(anctx, cfg, ws, warn)
	return func() {
		anstop()
		if task != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			task.Close(cctx)
			task.Client.Close()
		}
	}
}
