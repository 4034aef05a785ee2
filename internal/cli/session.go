package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/dockerd"
	"vak/internal/engine"
	"vak/internal/hostenv"
	"vak/internal/interact"
	"vak/internal/launch"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
	"vak/internal/taskenv"
	"vak/internal/trace"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// sessionCommands are the `vak session` tree, the `vak gc` alias and the
// hidden reap shim of session containers.
func (a *app) sessionCommands() []*cobra.Command {
	return []*cobra.Command{a.newSessionCmd(), a.newGCCmd(), newReapCmd(), newSessionWatchCmd(), newSessionSweepCmd()}
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
	)
	return cmd
}

// manager builds the session manager from config (nil: defaults only):
// launch.Sessions, with the hidden --label flags added.
func (a *app) manager(cfg *config.Config, sf *sessionFlags) (*taskenv.Manager, error) {
	labels := maps.Clone(a.labels)
	if labels == nil {
		labels = map[string]string{}
	}
	if err := addLabels(labels, sf.labels); err != nil {
		return nil, err
	}
	req := a.launchRequest("", cfg)
	req.Labels = labels
	return launch.Sessions(req, func(id string, lines []string) {
		for _, l := range lines {
			a.warnf("session %s: workspace watcher: %s", id, l)
		}
	}), nil
}

// sessionErr maps session errors to vak's exit statuses (see exitFor).
func sessionErr(err error) error { return exitFor(err) }

// quietGC removes finished sessions before a session command, best effort
// and bounded (a daemon that is down is reported by the command itself).
func quietGC(ctx context.Context, m *taskenv.Manager) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m.GC(ctx)
}

type createFlags struct {
	workspace, task, image, from, mode, network string
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
	fl.StringVar(&f.network, "network", "", "network policy: none, or proxied (egress only through vak's gateway, by the [network] rules of the user config) (default from config: none)")
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
	ws, cfg, err := a.workspaceConfig(runFlags{workspace: f.workspace, mode: f.mode, image: f.image, timeout: f.timeout, network: f.network})
	if err != nil {
		return err
	}
	end()
	if !cfg.Sandbox.Mode.Restricted() {
		return exit(ExitUsage, fmt.Errorf("mode %s: a session is a sandbox (use read-only or workspace-write)", cfg.Sandbox.Mode))
	}
	m, err := a.manager(cfg, sf)
	if err != nil {
		return err
	}
	defer m.Close()
	image := cfg.Sandbox.Image
	if f.from != "" {
		if f.image != "" {
			return exit(ExitUsage, errors.New("--from and --image exclude each other"))
		}
		if image, err = taskenv.SnapshotRef(f.from); err != nil {
			return exit(ExitUsage, err)
		}
	}
	// The quiet gc and the nested Docker setup (engine access, runtimes,
	// sidecar image) are independent: they run at once, and the create
	// starts after both.
	// What the gc reports of the sessions it ends is printed after it
	// (the Docker setup prints meanwhile).
	gcm, err := a.manager(cfg, sf)
	if err != nil {
		return err
	}
	defer gcm.Close()
	var planted [][]string
	gcm.Planted = func(id string, lines []string) { planted = append(planted, append([]string{id}, lines...)) }
	var gc sync.WaitGroup
	gc.Go(func() {
		defer tr.Begin("gc (quiet)")()
		quietGC(ctx, gcm)
	})
	defer gc.Wait()
	spec := taskenv.Spec{
		Task:           f.task,
		Workspace:      ws,
		BaseImage:      image,
		Limits:         cfg.Sandbox.Limits,
		Mode:           cfg.Sandbox.Mode,
		Env:            hostenv.Lookup(m.EnvAllowlist),
		Mounts:         f.mounts,
		Protected:      cfg.Files.Protected,
		DefaultTimeout: cfg.Sandbox.Timeout,
	}
	spec.NetworkPolicy = cfg.Network
	end = tr.Begin("docker setup")
	err = a.sessionDocker(ctx, m, cfg, &spec, f.docker)
	end()
	gc.Wait()
	for _, p := range planted {
		m.Planted(p[0], p[1:])
	}
	if err != nil {
		return err
	}
	if f.hold {
		spec.OwnerPID = os.Getpid()
	}
	sigctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	end = tr.Begin("create")
	s, err := m.Create(sigctx, spec)
	end()
	if err != nil {
		if spec.Docker && m.DockerBaseline == dockerd.BaselineSysbox && errors.Is(err, taskenv.ErrDockerUnavailable) {
			// Not exercised against a real Sysbox here (docs/nested-docker.md).
			err = fmt.Errorf("%w (the Sysbox sidecar; session.docker_runtime = \"runc\" in %s uses the capability-listed one)", err, trustedFile(cfg))
		}
		if spec.NetworkPolicy == sandbox.NetworkProxied {
			// A topology brought up for this create goes again.
			a.releaseProxyNet(context.Background(), ws)
		}
		return err
	}
	fmt.Fprintln(a.stdio.Out, s.ID())
	if f.hold {
		// The broker holds the session over its attached stdio until told
		// to stop, or until the session ends by itself.
		select {
		case <-sigctx.Done():
		case <-s.Done():
		}
		rmctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return s.Discard(rmctx)
	}
	s.Close()
	printTrace()
	if m.PoolSize > 0 && !f.noRefill {
		// After the ID is out: topping up the pool is the next create's speed.
		if _, err := m.FillPool(sigctx, spec); err != nil {
			a.warnf("refilling the warm pool: %v", err)
		}
	}
	return nil
}

// sessionDocker sets up nested Docker for spec when --docker or
// session.docker asks for it: the proxied network is required, the host's
// daemon must answer this user, and the sidecar image is ensured (m's
// DockerImage). A warm-pool pair that a create refuses to hand out is
// reported as a warning.
func (a *app) sessionDocker(ctx context.Context, m *taskenv.Manager, cfg *config.Config, spec *taskenv.Spec, flag bool) error {
	spec.Docker = flag || cfg.Session.Docker
	if !spec.Docker {
		return nil
	}
	spec.DockerPlaceholders = cfg.Session.DockerPlaceholders
	if spec.NetworkPolicy != sandbox.NetworkProxied {
		return exit(ExitUsage, fmt.Errorf("--docker (or session.docker) needs --network proxied: inner containers' traffic must go through the gateway (the network is %q)", spec.NetworkPolicy))
	}
	eng, err := engine.New()
	if err != nil {
		return err
	}
	tr := trace.From(ctx)
	end := tr.Begin("docker setup: engine access")
	err = engine.CheckAccess(ctx, eng, "nested Docker, --docker, starts its engine through the host's Docker daemon")
	end()
	if err != nil {
		return err
	}
	end = tr.Begin("docker setup: runtimes (docker info)")
	b, why, err := dockerBaseline(ctx, eng, cfg)
	end()
	if err != nil {
		return err
	}
	end = tr.Begin("docker setup: sidecar image")
	m.DockerImage, err = dockerd.EnsureImage(ctx, eng, dockerd.DefaultRecipe, a.stdio.Err)
	end()
	if err != nil {
		return err
	}
	m.DockerBaseline = b
	fmt.Fprintf(a.stdio.Err, "vak: nested Docker sidecar: %s; %s\n", b.Describe(), why)
	m.OnPoolReject = func(name string, err error) {
		a.warnf("warm pool: %s not claimed (removed): %v", name, err)
	}
	return nil
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
	m, err := a.manager(nil, sf)
	if err != nil {
		return err
	}
	defer m.Close()
	// The allowlist of copied variables is the sessions' (sandbox.env of
	// the trusted config included), read only when a name is copied.
	allow := hostenv.Allowlist()
	if slices.ContainsFunc(f.env, func(e string) bool { return !strings.Contains(e, "=") }) {
		cfg, err := a.loadConfig("")
		if err != nil {
			return err
		}
		allow = hostenv.Allowlist(cfg.Sandbox.Env...)
	}
	env, err := taskenv.CommandEnv(f.env, allow, os.LookupEnv)
	if err != nil {
		return exit(ExitUsage, err)
	}
	if f.tty || f.root {
		return a.sessionExecDocker(ctx, m, f, id, argv, env)
	}
	// -i streams stdin to the command as it arrives (the command may
	// answer before the input ends), like `vak run -i`.
	var stdin io.Reader
	if f.interactive {
		stdin = a.stdio.In
	}
	// The first SIGINT while an interactive command runs goes to it; a
	// second one, SIGTERM or SIGHUP ends it (see interactiveBash).
	sigctx, intr, stop := interact.Notify(ctx)
	defer stop()
	s, err := m.Open(sigctx, id)
	if err != nil {
		return err
	}
	defer s.Close()
	var sigs <-chan string
	if f.interactive {
		var disarm func()
		sigs, disarm = intr.Arm(a.stdio.Err)
		defer disarm()
	}
	var tail outputTail
	res, err := s.Exec(sigctx, taskenv.Command{
		Argv: argv, Dir: f.dir, Env: env, Timeout: f.timeout, StdinStream: stdin, Signal: sigs, MaxOutputBytes: f.maxOutput,
		Output: tail.tee(a.writeOutput),
	})
	switch {
	case sigctx.Err() != nil && ctx.Err() == nil:
		return exit(ExitInterrupted, errors.New("interrupted; command killed"))
	case err != nil:
		return err
	case res.TimedOut:
		return exit(ExitTimeout, fmt.Errorf("command timed out after %v and was killed", f.timeout))
	}
	a.warnTripwire(res)
	fmt.Fprint(a.stdio.Err, a.failureHint(&tail, res.ExitCode, true))
	return exit(res.ExitCode, nil)
}

// sessionExecDocker runs docker exec for a terminal or as root.
func (a *app) sessionExecDocker(ctx context.Context, m *taskenv.Manager, f execFlags, id string, argv []string, env map[string]string) error {
	if !f.tty {
		return a.sessionExecDockerPlain(ctx, m, f, id, argv, env)
	}
	sz := interact.Size(a.stdio.Out, a.stdio.In)
	args, err := m.InteractiveArgs(ctx, id, argv, f.dir, env, &taskenv.TTYSize{Rows: sz.Rows, Cols: sz.Cols}, f.root)
	if err != nil {
		return err
	}
	if !interact.OwnTerminals {
		// The docker CLI runs on vak's terminal and sets it raw itself.
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdio.In, a.stdio.Out, a.stdio.Err
		return dockerExecStatus(cmd.Run())
	}
	return a.relayDockerExec(ctx, args)
}

// relayDockerExec runs the `docker exec -it` args on a terminal of vak's
// own, started raw (worker.Exec.RawTerminal), relayed to vak's terminal as
// `vak run -t` relays the sandbox's (relayTerminal): keys typed before
// either terminal was raw reach the command as typed (the docker CLI on
// vak's terminal found them cooked, an end of input turned into a NUL),
// and vak restores its terminal however the run ends. SIGTERM and SIGHUP
// kill the docker CLI (exit 130); Ctrl-C is a key typed into the
// container's terminal.
func (a *app) relayDockerExec(ctx context.Context, args []string) error {
	sigctx, _, stopSignals := interact.Notify(ctx)
	defer stopSignals()
	relay, err := interact.StartRelay(a.stdio.In, a.stdio.Out)
	if err != nil {
		return err
	}
	defer relay.Stop()
	in := worker.NewInteraction(relay.Size)
	go in.Feed(relay.Stdin)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case sz := <-relay.Resize:
				in.Resize(sz)
			case <-done:
				return
			}
		}
	}()
	x := &worker.Exec{Workspace: "/", Env: os.Environ(), NoTripwire: true, RawTerminal: true}
	sz := relay.Size
	res, err := x.BashArgvInteractive(sigctx, args, wire.BashArgs{TTY: &sz}, in, func(_ string, data []byte) { a.stdio.Out.Write(data) })
	switch {
	case sigctx.Err() != nil && ctx.Err() == nil:
		return exit(ExitInterrupted, errors.New("interrupted; docker exec killed"))
	case err != nil:
		return exit(ExitUnavailable, fmt.Errorf("docker exec: %w", err))
	}
	return exit(res.ExitCode, nil)
}

// sessionExecDockerPlain runs docker exec without a terminal (--root) with
// the signal and timeout rules of the worker path: with -i the first
// SIGINT goes to the command, a second one, SIGTERM, SIGHUP (and without
// -i any of them) or --timeout kill it. docker exec forwards no signal, so
// vak delivers them in the container itself (taskenv.SignalArgs), finding
// the command by a random token in its environment.
func (a *app) sessionExecDockerPlain(ctx context.Context, m *taskenv.Manager, f execFlags, id string, argv []string, env map[string]string) error {
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	token := hex.EncodeToString(rnd[:])
	env = maps.Clone(env)
	if env == nil {
		env = map[string]string{}
	}
	env[taskenv.ExecMarkerEnv] = token
	args, err := m.InteractiveArgs(ctx, id, argv, f.dir, env, nil, f.root)
	if err != nil {
		return err
	}
	deliver := func(sig string, all bool) {
		sa, err := m.SignalArgs(context.WithoutCancel(ctx), id, token, sig, f.root, all)
		if err == nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			var out []byte
			out, err = exec.CommandContext(sctx, sa[0], sa[1:]...).CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
			}
		}
		if err != nil {
			a.warnf("signal %s to the command: %v", sig, err)
		}
	}
	sigctx, intr, stop := interact.Notify(ctx)
	defer stop()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = a.stdio.Out, a.stdio.Err
	if f.interactive {
		cmd.Stdin = a.stdio.In
	}
	// A stdin that is not a file is copied by a goroutine that may block
	// on a read after the command ended.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return exit(ExitUnavailable, fmt.Errorf("docker exec: %w", err))
	}
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		if errors.Is(err, exec.ErrWaitDelay) {
			err = nil // the command succeeded; its stdin was still being read
		}
		done <- err
	}()
	var sigs <-chan string
	if f.interactive {
		var disarm func()
		sigs, disarm = intr.Arm(a.stdio.Err)
		defer disarm()
	}
	var timeout <-chan time.Time
	if f.timeout > 0 {
		timer := time.NewTimer(f.timeout)
		defer timer.Stop()
		timeout = timer.C
	}
	// kill ends the command's process tree in the container and docker
	// exec; it kills once more after docker exec ended, for a command
	// that started while the first kill looked for it.
	kill := func() {
		deliver("KILL", true)
		cmd.Process.Kill()
		<-done
		deliver("KILL", true)
	}
	for {
		select {
		case err := <-done:
			return dockerExecStatus(err)
		case sig := <-sigs:
			deliver(sig, false)
		case <-timeout:
			kill()
			return exit(ExitTimeout, fmt.Errorf("command timed out after %v and was killed", f.timeout))
		case <-sigctx.Done():
			kill()
			return exit(ExitInterrupted, errors.New("interrupted; command killed"))
		}
	}
}

// dockerExecStatus maps docker exec's result to vak's: the command's exit
// status, or 69 when docker exec could not run.
func dockerExecStatus(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exit(ee.ExitCode(), nil)
	}
	if err != nil {
		return exit(ExitUnavailable, fmt.Errorf("docker exec: %w", err))
	}
	return nil
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
it with 'vak session create --from KEY'.`,
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
	m, err := a.manager(cfg, sf)
	if err != nil {
		return err
	}
	defer m.Close()
	man := taskenv.Manifest{}
	for _, e := range entries {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return exit(ExitUsage, fmt.Errorf("-m %q: want NAME=VALUE or NAME=@FILE", e))
		}
		if f, isFile := strings.CutPrefix(v, "@"); isFile {
			// vak computes the entry: the digest of the file's content.
			data, err := os.ReadFile(f)
			if err != nil {
				return exit(ExitUsage, fmt.Errorf("-m %s: %w", k, err))
			}
			sum := sha256.Sum256(data)
			v = "sha256:" + hex.EncodeToString(sum[:])
		}
		man[k] = v
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return exit(ExitUsage, fmt.Errorf("--manifest: %w", err))
		}
		man["file"] = string(data)
	}
	quietGC(ctx, m)
	ref, err := m.Snapshot(ctx, id, man)
	if err != nil {
		return err
	}
	if quiet {
		fmt.Fprintln(a.stdio.Out, ref.Key)
		return nil
	}
	cached := ""
	if ref.Cached {
		cached = " (cached: reused the existing image)"
	}
	fmt.Fprintf(a.stdio.Out, "key:   %s\nimage: %s %s%s\n", ref.Key, ref.Ref, ref.ID, cached)
	return nil
}

func (a *app) newSessionRmCmd(sf *sessionFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"discard"},
		Short:   "Discard sessions (their containers are killed and removed)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := a.manager(nil, sf)
			if err != nil {
				return err
			}
			defer m.Close()
			var errs []error
			for _, id := range args {
				if err := m.Discard(cmd.Context(), id); err != nil {
					errs = append(errs, err)
				}
			}
			quietGC(cmd.Context(), m)
			return sessionErr(errors.Join(errs...))
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
			m, err := a.manager(nil, sf)
			if err != nil {
				return err
			}
			defer m.Close()
			quietGC(cmd.Context(), m)
			list, err := m.List(cmd.Context())
			if err != nil {
				return sessionErr(err)
			}
			if quiet {
				for _, s := range list {
					if s.ID != "" {
						fmt.Fprintln(a.stdio.Out, s.ID)
					}
				}
				return nil
			}
			eng, _ := engine.New()
			tw := tabwriter.NewWriter(a.stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tAGE\tIMAGE\tNETWORK\tWORKSPACE")
			for _, s := range list {
				id := s.ID
				if id == "" {
					if !all {
						continue
					}
					id = "(pool) " + s.Name
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, s.State, time.Since(s.Created).Round(time.Second), short(s.Image), sessionNetwork(cmd.Context(), eng, s.Labels), s.Workspace)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "also list warm-pool containers")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only session IDs")
	return cmd
}

func short(image string) string {
	image = strings.TrimPrefix(image, "sha256:")
	if len(image) > 12 {
		return image[:12]
	}
	return image
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
	// Private temp dirs (and, as root, cgroups) of native runs whose vak
	// process is gone, e.g. killed with SIGKILL. Their commands died with
	// it: the sandbox's init is killed with its parent.
	for _, p := range broker.CleanStale(registry(config.Default(), nil).All()...) {
		fmt.Fprintf(a.stdio.Out, "removed %s: its vak process is gone\n", p)
	}
	a.stopOnDemandGateway(ctx)
	m, err := a.manager(nil, sf)
	if err != nil {
		return err
	}
	defer m.Close()
	rep, err := m.GC(ctx)
	if rep != nil {
		for _, r := range rep.Removed {
			name := r.ID
			if name == "" {
				name = r.Name
			}
			fmt.Fprintf(a.stdio.Out, "removed %s: %s\n", name, r.Reason)
		}
		for _, r := range rep.Skipped {
			fmt.Fprintf(a.stdio.Out, "skipped %s: %s\n", r.Name, r.Reason)
		}
	}
	if err != nil {
		return sessionErr(err)
	}
	// Proxied networks nobody uses any more (their receipts are kept).
	if eng, eerr := engine.New(); eerr == nil {
		if state, serr := paths.EnsureStateDir(); serr == nil {
			prep, perr := proxynet.GC(ctx, eng, state, m.Labels)
			if prep != nil {
				for _, k := range prep.Removed {
					fmt.Fprintf(a.stdio.Out, "removed proxied network %s: no sandbox uses it\n", k)
				}
				for _, s := range prep.Skipped {
					fmt.Fprintf(a.stdio.Out, "skipped proxied network %s: %s\n", s.Key, s.Reason)
				}
			}
			if perr != nil {
				return sessionErr(perr)
			}
		}
	}
	return nil
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
its guard; otherwise the pair is removed and the create starts cold.`,
		Example: `  vak session pool fill -w . --network proxied --docker
  vak session create -w . --network proxied --docker   # claims the pair`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ws, err := paths.CanonicalWorkspace(orDot(f.workspace))
			if err != nil {
				return exit(ExitUsage, err)
			}
			cfg, err := a.loadConfig(ws)
			if err != nil {
				return err
			}
			if err := applyFlags(cfg, runFlags{mode: f.mode, image: f.image, timeout: f.timeout, network: f.network}); err != nil {
				return exit(ExitUsage, err)
			}
			m, err := a.manager(cfg, sf)
			if err != nil {
				return err
			}
			defer m.Close()
			if m.PoolSize == 0 {
				return exit(ExitUsage, errors.New("session.pool_size is 0 in the user config: the warm pool is off"))
			}
			spec := taskenv.Spec{Workspace: ws, BaseImage: cfg.Sandbox.Image, Limits: cfg.Sandbox.Limits,
				Mode: cfg.Sandbox.Mode, Env: hostenv.Lookup(m.EnvAllowlist), Protected: cfg.Files.Protected, DefaultTimeout: cfg.Sandbox.Timeout,
				NetworkPolicy: cfg.Network}
			if err := a.sessionDocker(cmd.Context(), m, cfg, &spec, f.docker); err != nil {
				return sessionErr(err)
			}
			n, err := m.FillPool(cmd.Context(), spec)
			if err != nil && spec.NetworkPolicy == sandbox.NetworkProxied && n == 0 {
				a.releaseProxyNet(context.Background(), ws)
			}
			fmt.Fprintf(a.stdio.Out, "started %d\n", n)
			return sessionErr(err)
		},
	}
	fill.Flags().StringVarP(&f.workspace, "workspace", "w", "", "workspace directory (default: current directory)")
	fill.Flags().StringVar(&f.image, "image", "", "base image (default from config)")
	fill.Flags().StringVar(&f.mode, "mode", "", "read-only or workspace-write (default from config)")
	fill.Flags().DurationVar(&f.timeout, "timeout", 0, "default command timeout (default from config)")
	fill.Flags().StringVar(&f.network, "network", "", "network policy: none or proxied (default from config)")
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
			ready := os.NewFile(3, "ready")
			if ready == nil || state == "" {
				return exit(ExitUsage, errors.New("the workspace watcher needs --state and its ready pipe on fd 3"))
			}
			// SIGTERM (vak session rm, gc): stop; whoever sent it makes the
			// final sweep. SIGINT and SIGHUP do not reach it (a session of
			// its own, no terminal).
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			m := &taskenv.Manager{StateDir: state}
			defer m.Close()
			if err := m.RunWatcher(ctx, args[0], ready); err != nil {
				return exit(ExitFailure, err)
			}
			return nil
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
// entrypoint.
func runContainerWorker(cmd *cobra.Command) error {
	spec, _, err := worker.ReadSpecEnv()
	if err != nil {
		return exit(ExitInternal, fmt.Errorf("worker: %w", err))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	desc := fmt.Sprintf("container: vak worker as PID 1 of a session container (mode %s); commands run as its user under a subreaper shim", spec.Mode)
	err = worker.RunContainer(ctx, spec, desc, os.Stdin, os.Stdout)
	if errors.Is(err, worker.ErrIdle) || errors.Is(err, worker.ErrDeadline) {
		fmt.Fprintf(cmd.ErrOrStderr(), "vak: %v\n", err)
		return exit(ExitOK, nil)
	}
	if err != nil {
		return exit(ExitInternal, fmt.Errorf("worker: %w", err))
	}
	return exit(ExitOK, nil)
}

// sessionNetwork is the NETWORK column of `vak session ls`: none, or
// proxied with the state of the workspace's topology (a session whose
// network is gone says so).
func sessionNetwork(ctx context.Context, eng *engine.Client, labels map[string]string) string {
	if labels[proxynet.LabelClientOf] == "" {
		return string(sandbox.NetworkNone)
	}
	if eng == nil {
		return string(sandbox.NetworkProxied)
	}
	st := proxynet.NetworkState(ctx, eng, labels)
	if st == "ok" {
		return string(sandbox.NetworkProxied)
	}
	return string(sandbox.NetworkProxied) + " (" + st + ")"
}

// dockerBaseline chooses the nested Docker sidecar's baseline from the
// Engine's runtimes (docker info) and the trusted config's
// session.docker_runtime; "sysbox" without Sysbox is a config error naming
// the key and the file.
func dockerBaseline(ctx context.Context, eng *engine.Client, cfg *config.Config) (dockerd.Baseline, string, error) {
	runtimes, err := dockerd.Runtimes(ctx, eng)
	if err != nil {
		return "", "", err
	}
	choice := cfg.Session.DockerRuntime
	b, why, err := dockerd.ChooseBaseline(runtimes, choice)
	if err != nil {
		return "", "", exit(ExitConfig, fmt.Errorf("session.docker_runtime = %q (%s): %w", choice, trustedFile(cfg), err))
	}
	if choice == "" {
		choice = dockerd.RuntimeAuto
	}
	return b, why + ", session.docker_runtime = " + strconv.Quote(choice), nil
}
