package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/dockerguard"
)

// newDockerguardCmd serves the Docker API guard in front of a nested
// engine (run inside the dockerd sidecar; see docs/nested-docker.md).
func (a *app) newDockerguardCmd() *cobra.Command {
	var (
		p   dockerguard.Policy
		f   dockerguard.Flags
		raw string
	)
	cmd := &cobra.Command{
		Use:    "dockerguard --listen SOCK --upstream RAW --workspace DIR --trust-dir DIR --pool CIDR --dns IP",
		Short:  "Serve the Docker Engine API guard in front of a nested engine",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exitFor(dockerguard.Command(p, f, raw, a.stdio.Out))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&p.GuardSocket, "listen", "", "socket to serve the guarded API on (the agent's DOCKER_HOST)")
	fl.StringVar(&p.ReaperSocket, "reaper", "", "socket to serve the reaper-only API on (binds of the guard socket are rewritten to it)")
	fl.StringVar(&raw, "upstream", "", "the nested engine's raw socket")
	fl.StringVar(&p.Workspace, "workspace", "", "workspace path (allowed bind sources)")
	fl.StringVar(&p.TrustDir, "trust-dir", "", "trust dir (bound read-only into every container)")
	fl.StringVar(&f.Pool, "pool", "", "inner address pool")
	fl.StringVar(&f.DNS, "dns", "", "DNS server for inner containers (the gateway)")
	fl.StringArrayVar(&f.Labels, "label", nil, "KEY=VALUE label put on every created object (repeatable)")
	fl.StringArrayVar(&p.TrustEnv, "trust-env", nil, "NAME=VALUE CA variable set in every container (repeatable)")
	fl.StringArrayVar(&f.Env, "env", nil, "NAME=VALUE set in every container whose request does not set NAME (propagated secret placeholders; repeatable)")
	fl.StringVar(&p.StageDir, "stage-binds", "", "stage workspace bind sources here (opened beneath the workspace, bind-mounted; needs CAP_SYS_ADMIN in the engine's mount namespace)")
	for _, name := range []string{"listen", "upstream", "workspace", "trust-dir", "pool", "dns"} {
		cmd.MarkFlagRequired(name)
	}
	cmd.AddCommand(a.newDockerguardPingCmd())
	return cmd
}

// newDockerguardPingCmd asks a Docker API socket (the guard's) for
// `docker info` and prints the engine's version: how the claim of a
// warm-pool --docker pair checks, from inside the session, that the
// guard and the engine behind it answer.
func (a *app) newDockerguardPingCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "ping SOCKET",
		Short:  "Ask the Docker API on SOCKET for docker info; exit 0 when it answers",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			v, err := dockerguard.Ping(ctx, args[0])
			if err != nil {
				return exit(ExitUnavailable, err)
			}
			fmt.Fprintln(a.stdio.Out, v)
			return nil
		},
	}
}
