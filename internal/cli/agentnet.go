package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"vak/internal/agentnet"
	"vak/internal/launch"
)

// agentNet is the user's agent network broker as this invocation reaches
// it (launch.AgentNet).
func (a *app) agentNet() launch.AgentNet {
	return launch.AgentNet{UserConfig: a.userConfig, Executable: workerExecutable}
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
			load := func() ([]agentnet.Policy, error) {
				cfg, err := a.loadConfig("")
				if err != nil {
					return nil, err
				}
				return agentnet.PoliciesFromConfig(cfg.AgentNetwork), nil
			}
			ready := func(s string) { fmt.Fprintf(a.stdio.Err, "vak: agentnet broker listening on %s\n", s) }
			return exitFor(a.agentNet().Serve(cmd.Context(), load, ready, a.warn))
		},
	}
	edges := &cobra.Command{
		Use:   "edges",
		Short: "Show every edge the policies name, whether it is up, and why",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exitFor(a.agentNet().Edges(cmd.Context(), a.stdio.Out))
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke WORKSPACE",
		Short: "Revoke a workspace's task tokens and close its edges at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitFor(a.agentNet().Revoke(cmd.Context(), args[0], a.stdio.Out))
		},
	}
	reload := &cobra.Command{
		Use:   "reload",
		Short: "Make the running broker re-read [agent_network] (edges that went down close)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exitFor(a.agentNet().Reload(cmd.Context()))
		},
	}
	cmd.AddCommand(serve, edges, revoke, reload)
	return cmd
}
