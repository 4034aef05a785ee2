package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/egress/admin"
	"vak/internal/egress/asks"
	"vak/internal/egress/gateway"
	"vak/internal/errclass"
	"vak/internal/launch"
	"vak/internal/paths"
)

// The ask commands (docs/gateway.md, "Asks"): list the requests a gateway
// holds because no rule allows them, and answer them.

func (a *app) newGatewayAsksCmd(socket *string) *cobra.Command {
	var follow bool
	var ws string
	cmd := &cobra.Command{
		Use:   "asks",
		Short: "List the requests held for your answer (network.ask), or follow them as they come",
		Long: `List the requests the gateway holds because no rule allows them
([network] ask = true): each waits up to ask_timeout for
'vak gateway allow ID' or 'vak gateway deny ID', then gets 403.

The gateway is the on-demand gateway of native proxied runs when it is
running, else the one at --socket's default; --socket picks another, and
--workspace the gateway container of a docker-backed workspace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ws != "" {
				args := []string{"asks"}
				if follow {
					args = append(args, "--follow")
				}
				return a.workspaceGatewayAsk(cmd.Context(), ws, args...)
			}
			c, err := askClient(*socket)
			if err != nil {
				return exitFor(err)
			}
			if follow {
				return exitFor(unavailable(c.FollowAsks(cmd.Context(), func(e asks.Event) error {
					return printAskEvent(a.stdio.Out, e)
				})))
			}
			list, err := c.Asks(cmd.Context())
			if err != nil {
				return exitFor(unavailable(err))
			}
			return printAsks(a.stdio.Out, list, time.Now())
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing asks and answers as they happen")
	cmd.Flags().StringVarP(&ws, "workspace", "w", "", "the gateway container of this docker-backed workspace (its proxied network)")
	return cmd
}

// workspaceGatewayAsk runs an ask command in the gateway container of the
// docker-backed workspace dir.
func (a *app) workspaceGatewayAsk(ctx context.Context, dir string, args ...string) error {
	ws, err := paths.CanonicalWorkspace(dir)
	if err != nil {
		return exit(ExitUsage, err)
	}
	return exitFor(launch.WorkspaceGatewayAsk(ctx, ws, a.stdio.Out, a.stdio.Err, args...))
}

func (a *app) newGatewayAnswerCmd(allow bool, socket *string) *cobra.Command {
	var once, run, always bool
	var ws, via string
	use, short := "deny ID", "Refuse a held request (and the identical ones waiting with it); --always adds a deny rule"
	if allow {
		use, short = "allow ID", "Let a held request through: --once (default), for the gateway's --run, or --always (a rule)"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

--always writes the answer as a named rule into the user config (never a
project config), with a comment saying when and why: the ask's host and
port, its method, and its path up to the last '/'. The gateway reloads, so
later requests like it are decided by the rule, also after a restart.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n := btoi(once) + btoi(run) + btoi(always); n > 1 {
				return exit(ExitUsage, fmt.Errorf("--once, --run and --always: give one"))
			}
			scope := asks.Once
			if run {
				scope = asks.Run
			}
			if ws != "" {
				if always {
					return exit(ExitUsage, errors.New("--always with --workspace is not built yet: answer with --run (or --once) and add the rule to [network] rules of the user config yourself"))
				}
				args := []string{cmd.Name(), args[0], "--via", fmt.Sprintf("docker exec by host uid %d", os.Getuid())}
				if allow {
					args = append(args, "--"+string(scope))
				}
				return a.workspaceGatewayAsk(cmd.Context(), ws, args...)
			}
			c, err := askClient(*socket)
			if err != nil {
				return exitFor(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			res, err := launch.AnswerAsk(ctx, c, a.userConfig, args[0], allow, always, scope, via)
			if res.ConfigFile != "" {
				fmt.Fprintf(a.stdio.Out, "rule %q added to %s\n", res.Answer.Rule, res.ConfigFile)
			}
			if err != nil {
				return exitFor(unavailable(err))
			}
			fmt.Fprintf(a.stdio.Out, "ask %s: %s\n", args[0], answerText(res.Answer))
			return nil
		},
	}
	cmd.Flags().BoolVar(&always, "always", false, "also add the answer as a rule to the user config (see above)")
	cmd.Flags().StringVarP(&ws, "workspace", "w", "", "answer in the gateway container of this docker-backed workspace (its proxied network)")
	cmd.Flags().StringVar(&via, "via", "", "the channel the answer was relayed from, for the receipts")
	cmd.Flags().MarkHidden("via")
	if allow {
		cmd.Flags().BoolVar(&once, "once", false, "let the waiting request(s) through; the next one asks again (default)")
		cmd.Flags().BoolVar(&run, "run", false, "also allow every later request to the same host and port while this gateway runs (nothing is written to the config)")
	}
	return cmd
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func askClient(flag string) (*admin.Client, error) {
	sock, err := gateway.AskSocket(flag)
	if err != nil {
		return nil, err
	}
	return admin.NewClient(sock), nil
}

// unavailable classes a gateway that is not running as Unavailable.
func unavailable(err error) error {
	if errors.Is(err, admin.ErrNotRunning) {
		return errclass.Wrap(errclass.Unavailable, err)
	}
	return err
}

func answerText(a asks.Answer) string {
	switch {
	case a.Allow && a.Scope == asks.Run:
		return "allowed for this run"
	case a.Allow && a.Scope == asks.Always:
		return "allowed, and by a rule from now on"
	case a.Rule != "":
		return "denied, and by a rule from now on"
	case a.Allow:
		return "allowed once"
	}
	return "denied"
}

func askTarget(k asks.Ask) string {
	return fmt.Sprintf("%s %s:%d%s", k.Method, k.Host, k.Port, k.Path)
}

func printAsks(w io.Writer, list []asks.Ask, now time.Time) error {
	if len(list) == 0 {
		fmt.Fprintln(w, "no request is waiting for an answer")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWAITING\tGIVES UP IN\tREQUEST")
	for _, k := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", k.ID, k.Count, k.Expires.Sub(now).Round(time.Second), askTarget(k))
	}
	return tw.Flush()
}

func printAskEvent(w io.Writer, e asks.Event) error {
	var err error
	switch e.Kind {
	case "answered":
		a := asks.Answer{}
		if e.Answer != nil {
			a = *e.Answer
		}
		_, err = fmt.Fprintf(w, "answered %s: %s (%s): %s\n", e.Ask.ID, answerText(a), a.By, askTarget(e.Ask))
	case "expired":
		_, err = fmt.Fprintf(w, "expired  %s: nobody answered: %s\n", e.Ask.ID, askTarget(e.Ask))
	default:
		_, err = fmt.Fprintf(w, "ask      %s: %s (%d waiting; vak gateway allow %s)\n", e.Ask.ID, askTarget(e.Ask), e.Ask.Count, e.Ask.ID)
	}
	return err
}
