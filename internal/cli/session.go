package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/hints"
	"vak/internal/interact"
	"vak/internal/launch"
	"vak/internal/taskenv"
	"vak/internal/trace"
	"vak/internal/worker"
)

// sessionCommands are the `vak session` tree, the `vak gc` alias and the
// hidden reap shim of session containers.
func (a *app) sessionCommands() []*cobra.Command {
	return append([]*cobra.Command{a.newSessionCmd(), a.newGCCmd(), newReapCmd(), newSessionWatchCmd(), newSessionSweepCmd()}, podCommands()...)
}

// sessionFlags are shared by the session subcommands.
type sessionFlags struct {
	labels []string // hidden: extra labels (tests set vak.test=1)
}

func (a *app) newSessionCmd() *cobra.Command {
	var sf sessionFlags
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Session-scoped task environments: one container per task, reused across turns",
		Long: `A session is one long-lived container for a task in a workspace: created for
the first turn, reused by later turns (a package installed in turn 1 is there in
turn 2), and discarded, or snapshotted into an immutable image, at the end.

Commands run through vak's own worker inside the container (no docker exec per
command); 'vak session exec' reaches it through a socket in vak's state
directory that only you can open. The container gets the workspace at its own
path and nothing else of the host: never a Docker socket, credentials, vak's
config or state, or another workspace. See docs/sessions.md.`,
	}
	cmd.PersistentFlags().StringArrayVar(&sf.labels, "label", nil, "extra label KEY=VALUE on containers and images (filters ls and gc)")
	cmd.PersistentFlags().MarkHidden("label")
	cmd.AddCommand(
		a.newSessionCreateCmd(&sf),
		a.newSessionExecCmd(&sf),
		a.newSessionSnapshotCmd(&sf),
		a.newSessionRmCmd(&sf),
		a.newSessionLsCmd(&sf),
		a.newSessionGCCmd(&sf),
		a.newSessionPoolCmd(&sf),
		a.newSessionPullCmd(&sf),
		a.newSessionWorkerImageCmd(),
	)
	return cmd
}

// sessionRequest is the launch.Request of a session command, with
// workspace ws (may be empty), config cfg (nil: defaults only) and the
// hidden --label flags added.
func (a *app) sessionRequest(ws string, cfg *config.Config, sf *sessionFlags) (launch.Request, error) {
	labels := maps.Clone(a.labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if err := addLabels(labels, sf.labels); err != nil {
		return launch.Request{}, err
	}
	req := a.launchRequest(ws, cfg)
	req.Labels = labels
	return req, nil
}

// manager builds the session manager of sessionRequest (launch.Sessions).
func (a *app) manager(cfg *config.Config, sf *sessionFlags) (*taskenv.Manager, error) {
	req, err := a.sessionRequest("", cfg, sf)
	if err != nil {
		return nil, err
	}
	return launch.Sessions(req, nil), nil
}

// sessionErr maps session errors to vak's exit statuses (see exitFor).
func sessionErr(err error) error { return exitFor(err) }

type createFlags struct {
	workspace, task, image, from, mode, network string
	backend, runtime                            string
	mounts                                      []string
	hold, noRefill, docker, trace               bool
	timeout                                     time.Duration
}

func (a *app) newSessionCreateCmd(sf *sessionFlags) *cobra.Command {
	var f createFlags
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a session and print its ID",
		Long: `Create a session container for a task in the workspace and print the session ID
(TASK-HASH, derived from the task and the workspace).

The image (default: sandbox.image) is resolved to its image ID now and the
session is pinned to it. --from KEY starts from a snapshot. Limits, user and
environment come from [sandbox], lifetimes and the warm pool from [session].

Without --hold the session is detached: it ends after session.idle_timeout
without use, after session.max_lifetime, or with 'vak session rm'. With --hold,
vak stays in the foreground as the session's owner and removes it on exit
(SIGINT, SIGTERM); if vak is killed, 'vak gc' removes it.`,
		Example: `  id=$(vak session create --task build)
  vak session exec "$id" -- make deps
  vak session exec "$id" -- make test
  vak session snapshot "$id" -m step=deps
  vak session rm "$id"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return sessionErr(a.sessionCreate(cmd.Context(), sf, f))
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.workspace, "workspace", "w", "", "workspace directory (default: current directory)")
	fl.StringVar(&f.task, "task", taskenv.DefaultTask, "task name (with the workspace, it names the session)")
	fl.StringVar(&f.image, "image", "", "base image (default from config: sandbox.image)")
	fl.StringVar(&f.from, "from", "", "start from the snapshot with this key")
	fl.StringVar(&f.mode, "mode", "", "read-only or workspace-write (default from config)")
	fl.StringArrayVar(&f.mounts, "mount", nil, "extra host path mounted read-only at the same path (refused if it exposes credentials, sockets, vak's state or another workspace)")
	fl.DurationVar(&f.timeout, "timeout", 0, "default timeout of each command (default from config: sandbox.timeout)")
	fl.BoolVar(&f.hold, "hold", false, "stay in the foreground as the session's owner; remove it on exit")
	fl.BoolVar(&f.noRefill, "no-refill", false, "do not top up the warm pool after claiming from it")
	fl.BoolVar(&f.trace, "trace", false, "print how long each phase of the create took to stderr (also VAK_TRACE=1)")
	fl.BoolVar(&f.docker, "docker", false, "give the session a nested Docker engine behind vak's API guard (needs --network proxied; default from config: session.docker; its sidecar runs under runc with a fixed capability list, under Sysbox only with session.docker_runtime = \"sysbox\")")
	fl.StringVar(&f.backend, "backend", "", "where the session runs: docker (the host's Docker Engine) or kubernetes (a pod on the cluster of [kubernetes]; docs/kubernetes.md) (default from config: session.backend)")
	fl.StringVar(&f.network, "network", "", "network policy: none, or proxied (egress only through vak's gateway, by the [network] rules of the user config) (default from config: none)")
	fl.StringVar(&f.runtime, "runtime", "", "OCI runtime of a docker session's container: runc, or gVisor's runsc registered with --host-uds=create (and --overlay2=none for snapshots); network none only (default from config: sandbox.runtime, else the Engine's default)")
	return cmd
}

func (a *app) sessionCreate(ctx context.Context, sf *sessionFlags, f createFlags) error {
	var tr *trace.Trace
	if f.trace || trace.Enabled() {
		tr = trace.New(processStart)
		tr.Add("cli start", processStart, time.Now())
		ctx = trace.With(ctx, tr)
	}
	// Printed once, before the pool refill (its time is not the create's).
	printTrace := sync.OnceFunc(func() { tr.Print(a.stdio.Err) })
	defer printTrace()
	end := tr.Begin("config")
	ws, cfg, err := a.workspaceConfig(runFlags{workspace: f.workspace, mode: f.mode, image: f.image, timeout: f.timeout, network: f.network, runtime: f.runtime})
	if err != nil {
		return err
	}
	end()
	if f.backend != "" {
		if !slices.Contains(config.SessionBackends, f.backend) {
			return exit(ExitUsage, fmt.Errorf("--backend %q: want one of %s", f.backend, strings.Join(config.SessionBackends, ", ")))
		}
		cfg.Session.Backend = f.backend
	}
	req, err := a.sessionRequest(ws, cfg, sf)
	if err != nil {
		return err
	}
	req.Interrupts = func(ctx context.Context) (context.Context, func()) {
		return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	}
	return launch.CreateSession(ctx, req, launch.SessionCreate{
		Task: f.task, From: f.from, ImageSet: f.image != "", Mounts: f.mounts,
		Docker: f.docker, Hold: f.hold, NoRefill: f.noRefill,
		Created: func(id string) {
			fmt.Fprintln(a.stdio.Out, id)
			if !f.hold {
				printTrace()
			}
		},
	})
}

type execFlags struct {
	interactive, tty, root bool
	dir                    string
	env                    []string
	timeout                time.Duration
	maxOutput              int64
}

func (a *app) newSessionExecCmd(sf *sessionFlags) *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARGS...]",
		Short: "Run a command in a session",
		Long: `Run a command in a session and exit with its status. The command reaches the
container as argv (quoted, never re-interpreted), runs as the session's user in
the workspace (or --cwd, which must be inside it), with the session's
environment plus -e NAME=VALUE, and is killed with its whole process tree on
--timeout or Ctrl-C. Output is streamed.

Without -t this talks to the session's worker directly over its socket (no
Docker round trip). -i streams stdin; the first Ctrl-C (SIGINT to vak) while
the command runs is then forwarded to the command (if it is still running a
second later vak says so on stderr), and a second one kills it; SIGTERM and
SIGHUP kill it at once. -t runs 'docker exec -it' for an interactive
terminal (Ctrl-C is a key typed into it); --root runs it as root (package
installs) through docker exec, only in sessions created with
session.allow_install = true; without -t the rules above (stdin, Ctrl-C,
--timeout) still hold.

Exit status: the command's own (128+N if it died of signal N), or
  2   bad arguments, unknown session, cwd outside the workspace
  69  the session has ended (the message says why) or Docker is unreachable
  124 the command timed out and was killed
  130 interrupted; the command was killed`,
		Example: `  vak session exec default-0a1b2c3d4e -- go test ./...
  vak session exec --cwd sub -e GOFLAGS=-v ID -- make
  vak session exec -it ID -- sh
  vak session exec -it --root ID -- apt-get install -y jq`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return exit(ExitUsage, errors.New("usage: vak session exec [flags] ID -- CMD [ARGS...]"))
			}
			return sessionErr(a.sessionExec(cmd.Context(), sf, f, args[0], args[1:]))
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.interactive, "interactive", "i", false, "stream stdin to the command as it arrives (the first Ctrl-C/SIGINT then goes to the command, a second kills it)")
	fl.BoolVarP(&f.tty, "tty", "t", false, "allocate a terminal (runs docker exec -it)")
	fl.BoolVar(&f.root, "root", false, "run as root through docker exec (needs session.allow_install)")
	fl.StringVarP(&f.dir, "cwd", "C", "", "working directory inside the workspace")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set NAME=VALUE (NAME alone copies it from here, allowlisted names only)")
	fl.DurationVar(&f.timeout, "timeout", 0, "kill the command's process tree after this long")
	fl.Int64Var(&f.maxOutput, "max-output", 0, "bytes kept of each of stdout and stderr when not streaming")
	return cmd
}

func (a *app) sessionExec(ctx context.Context, sf *sessionFlags, f execFlags, id string, argv []string) error {
	req, err := a.sessionRequest("", nil, sf)
	if err != nil {
		return err
	}
	env, err := a.execEnv(f.env)
	if err != nil {
		return err
	}
	if f.tty && launch.IsKubeSession(id) {
		return exit(ExitUsage, errors.New("-t is not available in kubernetes sessions yet: use -i"))
	}
	if f.tty {
		m := launch.Sessions(req, nil)
		defer m.Close()
		return a.sessionExecTTY(ctx, m, f, id, argv, env)
	}
	// -i streams stdin to the command as it arrives (the command may
	// answer before the input ends), like `vak run -i`.
	var stdin io.Reader
	var arm func() (<-chan string, func())
	// The first SIGINT while an interactive command runs goes to it; a
	// second one, SIGTERM or SIGHUP ends it (see interactiveBash).
	sigctx, intr, stop := interact.Notify(ctx)
	defer stop()
	if f.interactive {
		stdin = a.stdio.In
		arm = func() (<-chan string, func()) { return intr.Arm(a.stdio.Err) }
	}
	var tail hints.Tail
	res, err := launch.RunSessionCommand(sigctx, req, id, taskenv.Command{
		Argv: argv, Dir: f.dir, Env: env, Timeout: f.timeout, StdinStream: stdin, MaxOutputBytes: f.maxOutput,
		Output: tail.Tee(a.writeOutput),
	}, taskenv.ExecOptions{Arm: arm, Root: f.root, Stdout: a.stdio.Out, Stderr: a.stdio.Err, Warn: a.warn})
	switch {
	case sigctx.Err() != nil && ctx.Err() == nil:
		return exit(ExitInterrupted, errors.New("interrupted; command killed"))
	case err != nil:
		return err
	case res.TimedOut:
		return exit(ExitTimeout, fmt.Errorf("command timed out after %v and was killed", f.timeout))
	case f.root:
		return exit(res.ExitCode, nil)
	}
	a.warnTripwire(res)
	fmt.Fprint(a.stdio.Err, hints.Failure(&tail, res.ExitCode, true, a.userConfigFile()))
	return exit(res.ExitCode, nil)
}

// execEnv is the -e variables of a command (launch.ExecEnv).
func (a *app) execEnv(vars []string) (map[string]string, error) {
	return launch.ExecEnv(vars, func() (*config.Config, error) { return a.loadConfig("") })
}

// sessionExecTTY runs docker exec -it relayed to vak's terminal
// (interact.DockerExec).
func (a *app) sessionExecTTY(ctx context.Context, m *taskenv.Manager, f execFlags, id string, argv []string, env map[string]string) error {
	sz := interact.Size(a.stdio.Out, a.stdio.In)
	args, err := m.InteractiveArgs(ctx, id, argv, f.dir, env, &taskenv.TTYSize{Rows: sz.Rows, Cols: sz.Cols}, f.root)
	if err != nil {
		return err
	}
	code, err := interact.DockerExec(ctx, args, a.std())
	if errors.Is(err, interact.ErrInterrupted) {
		return exit(ExitInterrupted, err)
	}
	if err != nil {
		return err
	}
	return exit(code, nil)
}

func (a *app) newSessionSnapshotCmd(sf *sessionFlags) *cobra.Command {
	var manifest []string
	var manifestFile string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "snapshot [flags] ID",
		Short: "Snapshot a session into an immutable, content-addressed image",
		Long: `Commit the session's environment into an image tagged vak-env:KEY and print the
key and the image. KEY hashes the session's base image ID, the environment
manifest (-m NAME=VALUE pairs, -m NAME=@FILE for the digest of a file such
as a lockfile, and/or --manifest FILE, describing how the environment was
made) and the policy generation. The same three reuse the existing image if
its content matches the session's filesystem (else the snapshot is refused);
changing any one makes a new one. Start a session from
it with 'vak session create --from KEY'.

A kubernetes session's snapshot is its home directory (/home/vak, where an
unprivileged session installs what it adds) on top of the image ID the
cluster ran, kept on this host in STATE/kube-snapshots/KEY, with the same
key rules (docs/kubernetes.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return sessionErr(a.sessionSnapshot(cmd.Context(), sf, args[0], manifest, manifestFile, quiet))
		},
	}
	cmd.Flags().StringArrayVarP(&manifest, "manifest-entry", "m", nil, "manifest entry NAME=VALUE, or NAME=@FILE for the SHA-256 of FILE's content")
	cmd.Flags().StringVar(&manifestFile, "manifest", "", "file whose content is the manifest entry \"file\"")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the key")
	return cmd
}

func (a *app) sessionSnapshot(ctx context.Context, sf *sessionFlags, id string, entries []string, file string, quiet bool) error {
	cfg, err := a.loadConfig("")
	if err != nil {
		return err
	}
	req, err := a.sessionRequest("", cfg, sf)
	if err != nil {
		return err
	}
	return launch.SnapshotReport(ctx, req, id, entries, file, quiet, a.stdio.Out)
}

func (a *app) newSessionRmCmd(sf *sessionFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"discard"},
		Short:   "Discard sessions (their containers are killed and removed)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := a.sessionRequest("", nil, sf)
			if err != nil {
				return err
			}
			return sessionErr(launch.Discard(cmd.Context(), req, args))
		},
	}
}

func (a *app) newSessionLsCmd(sf *sessionFlags) *cobra.Command {
	var all, quiet bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List your sessions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := a.sessionRequest("", nil, sf)
			if err != nil {
				return err
			}
			rows, err := launch.ListSessions(cmd.Context(), req, all, quiet)
			if err != nil {
				return sessionErr(err)
			}
			return launch.WriteSessions(a.stdio.Out, rows, quiet)
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "also list warm-pool containers")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only session IDs")
	return cmd
}

func (a *app) newSessionGCCmd(sf *sessionFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Remove sessions that are over (ended, expired, idle, or whose owner is gone)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.gc(cmd.Context(), sf)
		},
	}
}

func (a *app) gc(ctx context.Context, sf *sessionFlags) error {
	launch.CleanStaleRuns(a.stdio.Out)
	launch.StopOnDemandGateway(ctx, a.stdio.Out, a.warn)
	req, err := a.sessionRequest("", nil, sf)
	if err != nil {
		return err
	}
	return sessionErr(launch.GC(ctx, req, a.stdio.Out))
}

func (a *app) newSessionPoolCmd(sf *sessionFlags) *cobra.Command {
	var f createFlags
	pool := &cobra.Command{
		Use:   "pool",
		Short: "Manage the warm pool of pre-started session containers",
	}
	fill := &cobra.Command{
		Use:   "fill [flags]",
		Short: "Start containers until session.pool_size are ready for this workspace and image",
		Long: `Start session containers until session.pool_size are ready for what
'vak session create' with the same flags and config would make, so that create
claims one (a rename) instead of starting one.

With --docker (or session.docker) each entry is a pair: the session container
and its nested Docker engine (sidecar, guard, nested fence), started in a pool
slot of its own and answering through the guard. A create claims a pair only
when its sidecar is exactly what a cold create would start (same workspace,
sidecar image, nested pool, gateway, trust variables and propagated
placeholders), it runs behind a live fence, and 'docker info' answers through
its guard; otherwise the pair is removed and the create starts cold.

With session.backend = "kubernetes" the pool is pods on the cluster, started
as far as they go without the workspace (fence, vak installed) and waiting
for it; a create with the same pod (image, workspace path, mode, limits,
environment, gateway) claims one (docs/kubernetes.md).`,
		Example: `  vak session pool fill -w . --network proxied --docker
  vak session create -w . --network proxied --docker   # claims the pair`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, cfg, err := a.workspaceConfig(runFlags{workspace: f.workspace, mode: f.mode, image: f.image, timeout: f.timeout, network: f.network, runtime: f.runtime})
			if err != nil {
				return err
			}
			req, err := a.sessionRequest(ws, cfg, sf)
			if err != nil {
				return err
			}
			return sessionErr(launch.FillPool(cmd.Context(), req, f.docker, a.stdio.Out))
		},
	}
	fill.Flags().StringVarP(&f.workspace, "workspace", "w", "", "workspace directory (default: current directory)")
	fill.Flags().StringVar(&f.image, "image", "", "base image (default from config)")
	fill.Flags().StringVar(&f.mode, "mode", "", "read-only or workspace-write (default from config)")
	fill.Flags().DurationVar(&f.timeout, "timeout", 0, "default command timeout (default from config)")
	fill.Flags().StringVar(&f.network, "network", "", "network policy: none or proxied (default from config)")
	fill.Flags().StringVar(&f.runtime, "runtime", "", "OCI runtime of the pooled containers (default from config: sandbox.runtime)")
	fill.Flags().BoolVar(&f.docker, "docker", false, "fill with --docker pairs (session container + nested Docker engine; needs --network proxied; default from config: session.docker)")
	pool.AddCommand(fill)
	return pool
}

func orDot(s string) string {
	if s == "" {
		return "."
	}
	return s
}

func (a *app) newGCCmd() *cobra.Command {
	var sf sessionFlags
	var hf gcHomeFlags
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what vak left behind: sessions that are over (same as 'vak session gc')",
		Long: `Remove your session and warm-pool containers that are over: their worker
ended (idle timeout, lifetime, crash), they are past session.max_lifetime, or
the process that owned them (vak session create --hold, or an embedding broker)
is gone, e.g. killed with SIGKILL. Containers vak did not create are never
touched. Also removes the private temp dirs (vak-tmp-*) and, as root, the
cgroups of native (landlock) runs whose vak process is gone, stops the
on-demand gateway of native proxied runs when no run uses it, and removes
your proxied topologies that no container uses and no vak command holds.
What is in use when gc comes to it (a container another command is removing,
a mounted volume, a topology a command holds, a network something else is
connected to) is skipped and listed ("skipped NAME: REASON"), not an error.

Persistent agent homes (vak run --home) are removed only when asked, and then
nothing else is: --homes removes every home (each workspace's and each
profile's), --home workspace (with --workspace, default the current directory)
or --home profile:NAME removes that one. Each removed home is printed with its
size; --dry-run prints the list and removes nothing. Links an agent planted
in a home are removed as links, never followed.

Images are removed only when asked, and then nothing else is: --images
removes the vak-net and vak-dockerd images that this vak does not use (each
vak binary builds its own content-addressed vak-net image, so upgrades leave
the old ones behind), except images tagged :devcontainer, images younger than
an hour and images a container still uses. --dry-run lists them.`,
		Example: `  vak gc
  vak gc --images --dry-run
  vak gc --homes --dry-run
  vak gc --home profile:work
  vak gc --home workspace -w ~/src/app`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hf.images {
				if hf.all || hf.one != "" {
					return exit(ExitUsage, errors.New("vak gc: --images cannot be combined with --homes or --home"))
				}
				return a.gcImages(cmd.Context(), hf.dryRun, sf.labels)
			}
			if hf.all || hf.one != "" || hf.dryRun {
				return a.gcHomes(hf)
			}
			return a.gc(cmd.Context(), &sf)
		},
	}
	cmd.Flags().BoolVar(&hf.all, "homes", false, "remove every persistent agent home (and nothing else)")
	cmd.Flags().StringVar(&hf.one, "home", "", "remove one persistent home: workspace (of --workspace) or profile:NAME (and nothing else)")
	cmd.Flags().StringVarP(&hf.workspace, "workspace", "w", "", "the workspace of --home workspace (default: current directory)")
	cmd.Flags().BoolVar(&hf.images, "images", false, "remove the vak-net and vak-dockerd images this vak does not use (and nothing else)")
	cmd.Flags().BoolVar(&hf.dryRun, "dry-run", false, "with --homes, --home or --images: list what would be removed, remove nothing")
	cmd.Flags().StringArrayVar(&sf.labels, "label", nil, "only objects with label KEY=VALUE")
	cmd.Flags().MarkHidden("label")
	return cmd
}

// newReapCmd is the reap shim every session command runs under (see
// worker.Reap); it exists only inside session containers.
func newReapCmd() *cobra.Command {
	return &cobra.Command{
		Use:                worker.ReapCommand,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return exit(worker.Reap(args), nil)
		},
	}
}

// newSessionWatchCmd is a session's workspace watcher
// (taskenv.RunWatcher), which session create starts detached; it reports
// its first pass on fd 3.
func newSessionWatchCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:    taskenv.WatcherCommand + " --state DIR ID",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := taskenv.WatcherMain(cmd.Context(), state, args[0])
			if err != nil && !errors.Is(err, taskenv.ErrWatcherUsage) {
				return exit(ExitFailure, err)
			}
			return exitFor(err)
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "vak's state directory")
	return cmd
}

// newSessionSweepCmd is the sweep as root of a session's workspace, in a
// container of its own (taskenv.RunSweeper): the request on stdin, what it
// did on stdout.
func newSessionSweepCmd() *cobra.Command {
	return &cobra.Command{
		Use:    taskenv.SweepCommand,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := taskenv.RunSweeper(cmd.InOrStdin(), cmd.OutOrStdout()); err != nil {
				return exit(ExitFailure, err)
			}
			return nil
		},
	}
}

// runContainerWorker is `vak __worker --container`: a session container's
// entrypoint (worker.ServeContainer).
func runContainerWorker(cmd *cobra.Command) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := worker.ServeContainer(ctx, os.Stdin, os.Stdout, cmd.ErrOrStderr()); err != nil {
		return exit(ExitInternal, fmt.Errorf("worker: %w", err))
	}
	return exit(ExitOK, nil)
}
