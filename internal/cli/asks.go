package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"vak/internal/egress/asks"
	"vak/internal/launch"
)

// The ask commands (docs/gateway.md, "Asks"): list the requests a gateway
// holds because no rule allows them, and answer them.

func (a *app) newGatewayAsksCmd(socket *string) *cobra.Command {
	var c launch.AskCommand
	cmd := &cobra.Command{
		Use:   "asks",
		Short: "List the requests held for your answer (network.ask), or follow them as they come",
		Long: `List the requests the gateway holds because no rule allows them
([network] ask = true): each waits up to ask_timeout for 'vak gateway allow
ID' or 'vak gateway deny ID', then gets 403. The gateway: the on-demand one
of native proxied runs when it runs, else --socket's; --workspace picks the
gateway container of a docker-backed workspace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.Socket = *socket
			return exitFor(launch.ListAsksReport(cmd.Context(), c, a.stdio.Out, a.stdio.Err))
		},
	}
	cmd.Flags().BoolVarP(&c.Follow, "follow", "f", false, "keep printing asks and answers as they happen")
	cmd.Flags().BoolVar(&c.JSON, "json", false, "print JSON: the list, or with --follow one event per line")
	cmd.Flags().StringVarP(&c.Workspace, "workspace", "w", "", "the gateway container of this docker-backed workspace")
	return cmd
}

func (a *app) newGatewayAnswerCmd(allow bool, socket *string) *cobra.Command {
	c := launch.AskCommand{Allow: allow, Scope: asks.Once}
	var run, once bool
	use, short := "deny ID", "Refuse a held request (and the identical ones waiting with it)"
	if allow {
		use, short = "allow ID", "Let a held request through: --once (default), for the gateway's --run, or --always"
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(1),
		Long: short + `. --always also writes the answer as a named rule into the user config
(the ask's host, port, method and path up to the last '/', with a comment)
and reloads the gateway, so the rule decides from then on.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if once && run || c.Always && (once || run) {
				return exit(ExitUsage, errors.New("--once, --run and --always: give one"))
			}
			if run {
				c.Scope = asks.Run
			}
			c.ID, c.Socket, c.UserConfig = args[0], *socket, a.userConfig
			return exitFor(launch.AnswerAskReport(cmd.Context(), c, a.stdio.Out, a.stdio.Err))
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&c.Always, "always", false, "also add the answer as a rule to the user config")
	fl.StringVarP(&c.Workspace, "workspace", "w", "", "answer in the gateway container of this docker-backed workspace")
	fl.StringVar(&c.Via, "via", "", "the channel the answer was relayed from, for the receipts")
	fl.MarkHidden("via")
	if allow {
		fl.BoolVar(&once, "once", false, "let the waiting request(s) through; the next one asks again (default)")
		fl.BoolVar(&run, "run", false, "also allow later requests to the same host and port while this gateway runs")
	}
	return cmd
}

func (a *app) newUICmd() *cobra.Command {
	c := launch.UICommand{Out: a.stdio.Out}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a local page that shows live decisions and answers held requests (asks)",
		Long: `Serve a page on loopback with the gateways' decisions as they happen, the
requests held for your answer ([network] ask = true) with Allow and Deny buttons,
the rules, the sessions and each receipts log with its verification status,
for the on-demand gateway of native proxied runs, a standalone 'vak gateway',
--socket's and the gateways of running docker-backed workspaces. Open the
address it prints: it carries a token made at each start. Only your own
processes, with the token, through the printed host name and from the page's
own origin, are served. See docs/gateway.md, "The page: vak ui".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exitFor(launch.UI(cmd.Context(), a.launchRequest("", nil), c))
		},
	}
	cmd.Flags().StringVar(&c.Listen, "listen", "127.0.0.1:0", "loopback address of the page (port 0: a free one)")
	cmd.Flags().StringArrayVar(&c.Sockets, "socket", nil, "also follow the gateway with this admin socket (repeatable)")
	return cmd
}
