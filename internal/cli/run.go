package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/shellquote"
)

type runFlags struct {
	workspace string
	mode      string
	backend   string
	image     string
	timeout   time.Duration
}

func (a *app) newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run one command in the sandbox",
		Long: `Run one command in the sandbox and exit with its status.

The workspace (default: the current directory) is the only tree the command may
write (mode workspace-write) or read beyond the system (mode read-only). Its
stdout and stderr are streamed; stdin is not forwarded. On timeout or Ctrl-C the
command and its container are killed, nothing is left behind.

Exit status: the command's own status (128+N if it died of signal N), or
  69  the sandbox backend is unavailable (e.g. Docker daemon unreachable); nothing ran
  78  a config file is invalid; nothing ran
  124 the command timed out and was killed
  130 vak was interrupted and killed the command`,
		Example: `  vak run -- make test
  vak run --backend docker --workspace ~/src/app -- sh -c 'id; touch f'
  vak run --mode read-only --timeout 30s -- ls -la`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.run(cmd.Context(), f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.workspace, "workspace", "w", "", "workspace directory (default: current directory)")
	fl.StringVar(&f.mode, "mode", "", "sandbox mode: read-only, workspace-write or full-access (default from config: workspace-write)")
	fl.StringVar(&f.backend, "backend", "", "sandbox backend: auto, landlock, seatbelt, docker or none (default from config: auto)")
	fl.StringVar(&f.image, "image", "", "container image for the docker backend (default from config: "+docker.DefaultImage+")")
	fl.DurationVar(&f.timeout, "timeout", 0, "kill the command after this long (default from config: none)")
	return cmd
}

// applyFlags overrides cfg with command-line flags, which are trusted.
func applyFlags(cfg *config.Config, f runFlags) error {
	if f.mode != "" {
		m, err := sandbox.ParseMode(f.mode)
		if err != nil {
			return fmt.Errorf("--mode: %w", err)
		}
		cfg.Sandbox.Mode = m
	}
	if f.backend != "" {
		n, err := sandbox.ParseName(f.backend)
		if err != nil {
			return fmt.Errorf("--backend: %w", err)
		}
		cfg.Sandbox.Backend = n
	}
	if f.image != "" {
		cfg.Sandbox.Image = f.image
	}
	if f.timeout < 0 {
		return fmt.Errorf("--timeout: must not be negative")
	}
	if f.timeout > 0 {
		cfg.Sandbox.Timeout = f.timeout
	}
	return nil
}

func (a *app) run(ctx context.Context, f runFlags, args []string) error {
	if err := shellquote.Check(args...); err != nil {
		return exit(ExitUsage, err)
	}
	wsArg := f.workspace
	if wsArg == "" {
		wsArg = "."
	}
	ws, err := paths.CanonicalWorkspace(wsArg)
	if err != nil {
		return exit(ExitUsage, err)
	}
	cfg, err := a.loadConfig(ws)
	if err != nil {
		return err
	}
	if err := applyFlags(cfg, f); err != nil {
		return exit(ExitUsage, err)
	}
	b, _, err := registry(cfg).Resolve(cfg.Sandbox.Backend, cfg.Sandbox.Mode)
	if err != nil {
		return exit(ExitUnavailable, fmt.Errorf("sandbox: %w", err))
	}
	if err := b.Available(ctx); err != nil {
		return exit(ExitUnavailable, fmt.Errorf("sandbox backend %s: %w; nothing was run", b.Name(), err))
	}

	c := sandbox.Command{
		ID:        newID(),
		Shell:     shellquote.Join(args),
		Workspace: ws,
		Mode:      cfg.Sandbox.Mode,
		Limits:    cfg.Sandbox.Limits,
		Timeout:   cfg.Sandbox.Timeout,
	}
	var argv []string
	var cleanup func()
	switch b := b.(type) {
	case sandbox.Wrapper:
		if argv, err = b.Wrap(c); err != nil {
			return exit(ExitUsage, err)
		}
		if d, ok := b.(*docker.Backend); ok {
			cleanup = func() {
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := d.Remove(cctx, c.ID); err != nil {
					a.warnf("cleanup: %v", err)
				}
			}
		}
	default:
		if b.Name() != string(sandbox.None) {
			return exit(ExitUnavailable, fmt.Errorf("sandbox backend %s: %w", b.Name(), sandbox.ErrNotYetAvailable))
		}
		argv = args // full access: the command runs on the host, unsandboxed
	}

	code, err := a.execute(ctx, argv, ws, c.Timeout, cleanup)
	if err != nil {
		return err
	}
	if d, ok := b.(*docker.Backend); ok && code == 125 {
		// docker run's own failure status; if the daemon went away, say so.
		d.Invalidate()
		if perr := d.Available(context.Background()); perr != nil {
			return exit(ExitUnavailable, fmt.Errorf("sandbox backend docker: %w", perr))
		}
	}
	return exit(code, nil)
}

// execute runs argv with vak's stdio, honouring timeout and SIGINT/SIGTERM.
// On either, cleanup runs (removing the container) and the process is killed.
func (a *app) execute(ctx context.Context, argv []string, dir string, timeout time.Duration, cleanup func()) (int, error) {
	sigctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	runctx := sigctx
	if timeout > 0 {
		var cancel context.CancelFunc
		runctx, cancel = context.WithTimeoutCause(sigctx, timeout, errTimeout)
		defer cancel()
	}
	cmd := exec.CommandContext(runctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = a.stdio.Out, a.stdio.Err
	cmd.Cancel = func() error {
		if cleanup != nil {
			cleanup()
		}
		return cmd.Process.Kill()
	}
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	switch {
	case errors.Is(context.Cause(runctx), errTimeout):
		return 0, exit(ExitTimeout, fmt.Errorf("command timed out after %v and was killed", timeout))
	case sigctx.Err() != nil && ctx.Err() == nil:
		return 0, exit(ExitInterrupted, errors.New("interrupted; command killed"))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 0, exit(ExitInternal, fmt.Errorf("run %s: %w", argv[0], err))
	}
	return 0, nil
}

var errTimeout = errors.New("timeout")
