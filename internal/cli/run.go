package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"vak/internal/agenthome"
	"vak/internal/config"
	"vak/internal/errclass"
	"vak/internal/hints"
	"vak/internal/interact"
	"vak/internal/launch"
	"vak/internal/paths"
	"vak/internal/sandbox/docker"
	"vak/internal/shellquote"
	"vak/internal/trace"
	"vak/internal/worker/wire"
)

// processStart is when this process's Go packages were initialised: the
// start of a trace's "cli start" phase.
var processStart = time.Now()

// workerExecutable is the binary re-executed as the worker; empty means
// this one. Tests that call Main in-process point it at a built vak.
var workerExecutable string

type runFlags struct {
	workspace string
	mode      string
	backend   string
	image     string
	runtime   string
	timeout   time.Duration
	network   string
	home      string
	stdin     stdinFlags
	labels    []string // hidden: extra labels on what vak creates (tests set vak.test=1)
	trace     bool
}

func (a *app) newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run one command in the sandbox",
		Long: `Run one command in the sandbox and exit with its status.

The workspace (default: the current directory) is the only tree the command may
write (mode workspace-write) or read beyond the system (mode read-only). Its
stdout and stderr are streamed. On timeout or Ctrl-C the command's whole process
tree (or its container) is killed; nothing is left behind.

-i forwards stdin to the command (otherwise it reads nothing). -t runs the
command on a pseudo-terminal allocated inside the sandbox and implies -i; it is
on by default when stdin and stdout are terminals (-t=false turns it off). Your
terminal is then in raw mode: every key, Ctrl-C included, goes to the command
(Ctrl-C interrupts the command, not vak), window-size changes follow, and your
terminal's mode is restored when the command ends. The end of your input
reaches the command as its end, also a Ctrl-D typed before vak made your
terminal raw (as script(1) types one when its own input ends). Ctrl-C with -i but no
terminal (stdin a pipe or -t=false): the first SIGINT vak receives while the
command runs is forwarded to the command (an agent that handles Ctrl-C gets
it; if the command is still running a second later vak says so on stderr),
and a second SIGINT kills the command (status 130). SIGTERM and SIGHUP kill
it at once, as does SIGINT before the command started. The command never holds a
descriptor of your terminal, only of its own. Both backends run interactive
commands: the native one allocates the terminal in the sandbox's own devpts,
docker in the container (the command joins its container through docker exec;
the container's init keeps reading vak's lifeline, so a killed vak still takes
the command down).

--home says what the command sees as HOME (never your real home): fresh, an
empty private home gone after the run; workspace (the default), a private home
kept for this workspace in vak's state dir, so an agent finds its settings,
history and login again next run; profile:NAME, a kept home shared by every
workspace that names it. vak doctor shows the path and size; vak gc --homes
removes them. See docs/agents.md.

Exit status: the command's own status (128+N if it died of signal N), or
  69  the sandbox backend is unavailable (e.g. Docker daemon unreachable,
      kernel without Landlock); nothing ran
  78  a config file is invalid; nothing ran
  124 the command timed out and was killed
  130 vak was interrupted and killed the command`,
		Example: `  vak run -- make test
  vak run --backend docker --workspace ~/src/app -- sh -c 'id; touch f'
  vak run --mode read-only --timeout 30s -- ls -la
  vak run -- sh                 # an interactive shell (terminal inside the sandbox)
  vak run --backend docker -- sh  # the same in a container
  git diff | vak run -i -- wc -l`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.stdin.TTYSet = cmd.Flags().Changed("tty")
			return a.run(cmd.Context(), f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.labels, "label", nil, "extra label KEY=VALUE on containers, networks and volumes vak creates")
	fl.MarkHidden("label")
	fl.BoolVarP(&f.stdin.Interactive, "interactive", "i", false, "forward stdin to the command (the first Ctrl-C/SIGINT then goes to the command, a second kills it)")
	fl.BoolVarP(&f.stdin.TTY, "tty", "t", false, "run the command on a terminal inside the sandbox (default: when stdin and stdout are terminals)")
	fl.StringVarP(&f.workspace, "workspace", "w", "", "workspace directory (default: current directory)")
	fl.StringVar(&f.mode, "mode", "", "sandbox mode: read-only, workspace-write or full-access (default from config: workspace-write)")
	fl.StringVar(&f.backend, "backend", "", "sandbox backend: auto, landlock, seatbelt, docker or none (default from config: auto)")
	fl.StringVar(&f.image, "image", "", "container image for the docker backend (default from config: "+docker.DefaultImage+")")
	fl.StringVar(&f.runtime, "runtime", "", "OCI runtime of the docker backend's containers, one `docker info` lists, e.g. runsc for gVisor (default from config: sandbox.runtime, else the Engine's default)")
	fl.DurationVar(&f.timeout, "timeout", 0, "kill the command after this long (default from config: none)")
	fl.BoolVar(&f.trace, "trace", false, "print how long each phase took to stderr (also VAK_TRACE=1)")
	fl.StringVar(&f.network, "network", "", "network policy: none, or proxied (egress only through vak's gateway, by the [network] rules of the user config; native backend: your on-demand gateway, docker: the workspace's topology) (default from config: none)")
	homeFlag(fl, &f.home)
	return cmd
}

// homeFlag adds --home.
func homeFlag(fl *pflag.FlagSet, v *string) {
	fl.StringVar(v, "home", "", "the sandbox's HOME: fresh (empty, per run), workspace (kept per workspace in vak's state dir) or profile:NAME (kept, shared by workspaces) (default from config: "+agenthome.Default.String()+")")
}

// applyFlags overrides cfg with command-line flags, which are trusted.
func applyFlags(cfg *config.Config, f runFlags) error {
	return cfg.Apply(config.Overrides{Mode: f.mode, Backend: f.backend, Image: f.image, Runtime: f.runtime, Network: f.network, Home: f.home, Timeout: f.timeout})
}

// workspaceConfig resolves the --workspace flag (default: the current
// directory) to the canonical workspace, loads the config for it, and
// applies the trusted command-line flags.
func (a *app) workspaceConfig(f runFlags) (string, *config.Config, error) {
	ws, err := paths.CanonicalWorkspace(orDot(f.workspace))
	if err != nil {
		return "", nil, exit(ExitUsage, err)
	}
	cfg, err := a.loadConfig(ws)
	if err != nil {
		return "", nil, err
	}
	if err := applyFlags(cfg, f); err != nil {
		return "", nil, exit(ExitUsage, err)
	}
	return ws, cfg, nil
}

func (a *app) run(ctx context.Context, f runFlags, args []string) error {
	var tr *trace.Trace
	if f.trace || trace.Enabled() {
		tr = trace.New(processStart)
		tr.Add("cli start", processStart, time.Now())
		// Printed last, after the teardown below.
		defer tr.Print(a.stdio.Err)
		ctx = trace.With(ctx, tr)
	}
	if err := shellquote.Check(args...); err != nil {
		return exit(ExitUsage, err)
	}
	if a.labels == nil && len(f.labels) > 0 {
		a.labels = map[string]string{}
	}
	if err := addLabels(a.labels, f.labels); err != nil {
		return err
	}
	end := tr.Begin("config")
	ws, cfg, err := a.workspaceConfig(f)
	end()
	if err != nil {
		return err
	}
	var intr *interact.Interrupts
	req := a.launchRequest(ws, cfg)
	req.Interactive, req.Terminal, req.OneCommand = f.stdin.Interactive, a.hasTerminal(), true
	if f.stdin.TTYSet {
		req.TTY = &f.stdin.TTY
	}
	req.NetworkIdle = cfg.Session.RunNetworkIdle
	req.Interrupts = func(ctx context.Context) (context.Context, func()) {
		ctx, ir, stop := interact.Notify(ctx)
		intr = ir
		return ctx, stop
	}
	r, err := launch.Start(ctx, req)
	if err != nil {
		return startErr(err)
	}
	defer func() {
		if sw := r.Close(); sw != nil {
			a.warnTripwire(sw)
		}
	}()
	// The workspace's agent network registration lives as long as this run.
	defer a.agentNet().Hold(r.Context, cfg, ws, a.warn)()
	return a.runCommand(ctx, r, cfg, args, f.stdin, intr)
}

// runCommand runs args in r's session (interactively when stdin asks for
// it) and maps the outcome to vak run's exit status; ctx is vak's own
// context, r.Context the run's (which interrupts end).
func (a *app) runCommand(ctx context.Context, r *launch.Run, cfg *config.Config, args []string, stdin stdinFlags, intr *interact.Interrupts) error {
	sigctx := r.Context
	req := wire.BashArgs{Command: shellquote.Join(args), Stream: true}
	if cfg.Sandbox.Timeout > 0 {
		req.TimeoutMS = cfg.Sandbox.Timeout.Milliseconds()
	}
	end := trace.From(ctx).Begin("command")
	var tail hints.Tail
	onOutput := tail.Tee(a.writeOutput)
	res, interactive, err := interact.Bash(sigctx, r.Session, r.Backend, req, stdin, a.std(), intr, onOutput)
	if !interactive {
		res, err = r.Session.Bash(sigctx, req, onOutput)
	}
	end()
	switch {
	case sigctx.Err() != nil && ctx.Err() == nil:
		return exit(ExitInterrupted, errors.New("interrupted; command killed"))
	case errors.Is(err, errclass.Unavailable):
		return exit(ExitUnavailable, err)
	case err != nil:
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeOutside {
			return exit(ExitUsage, err)
		}
		return exit(ExitInternal, err)
	case res.TimedOut:
		return exit(ExitTimeout, fmt.Errorf("command timed out after %v and was killed", cfg.Sandbox.Timeout))
	}
	a.warnTripwire(res)
	fmt.Fprint(a.stdio.Err, hints.Failure(&tail, res.ExitCode, false, a.userConfigFile()))
	return exit(res.ExitCode, nil)
}

// addLabels adds the hidden --label KEY=VALUE flags to labels (of what
// this invocation creates).
func addLabels(labels map[string]string, flags []string) error {
	for _, l := range flags {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return exit(ExitUsage, fmt.Errorf("--label %q: want KEY=VALUE", l))
		}
		labels[k] = v
	}
	return nil
}

// launchRequest is the part of a launch.Request every command fills the
// same way: the workspace and config it loaded, its labels, this program
// as the worker and gateway, and where warnings and progress go.
func (a *app) launchRequest(ws string, cfg *config.Config) launch.Request {
	return launch.Request{Workspace: ws, Config: cfg, Labels: a.labels, Executable: workerExecutable,
		UserConfig: a.userConfig, Warn: a.warn, Progress: a.stdio.Err}
}

// std is vak's standard streams, for interact.
func (a *app) std() interact.IO {
	return interact.IO{In: a.stdio.In, Out: a.stdio.Out, Err: a.stdio.Err}
}

// writeOutput writes a command's output chunk to vak's own stream of the
// same name.
func (a *app) writeOutput(stream string, data []byte) {
	if stream == "stderr" {
		a.stdio.Err.Write(data)
	} else {
		a.stdio.Out.Write(data)
	}
}

// warnTripwire reports what the worker's check after a command did.
func (a *app) warnTripwire(res *wire.BashResult) {
	for _, w := range res.CheckWarnings() {
		a.warnf("%s", w)
	}
}
