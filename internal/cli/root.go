// Package cli implements vak's command line. cmd/vak only calls Main; every
// subcommand lives in a file of its own here and delegates real work to the
// internal packages.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/errclass"
	"vak/internal/keeper"
	"vak/internal/launch"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// Exit statuses of vak itself. Otherwise `vak run` exits with the status of
// the command it ran (128+N when the command died of signal N).
const (
	ExitOK          = 0
	ExitFailure     = 1   // a vak subcommand failed (doctor found problems, ...)
	ExitUsage       = 2   // bad flags or arguments
	ExitUnavailable = 69  // the sandbox backend cannot run (daemon down, Landlock missing): nothing ran
	ExitInternal    = 70  // vak itself failed
	ExitConfig      = 78  // a config file is invalid: nothing ran
	ExitTimeout     = 124 // the command exceeded its timeout and was killed
	ExitInterrupted = 130 // vak was interrupted (SIGINT/SIGTERM) and killed the command
)

// Stdio are the streams a command uses.
type Stdio struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// exitError carries an exit status out of a subcommand.
type exitError struct {
	code int
	err  error // printed as "vak: <err>" unless nil
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exit returns an error that makes Main exit with code, printing err if set.
func exit(code int, err error) error { return &exitError{code: code, err: err} }

// exitFor maps an error to vak's exit status by its class (errclass), in
// this one place: the packages say what kind of failure each sentinel is,
// the command line says what status a kind gets. An error that already
// carries a status keeps it; one without a class is a plain failure.
func exitFor(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	switch errclass.Of(err) {
	case errclass.Config:
		return exit(ExitConfig, err)
	case errclass.Unavailable:
		return exit(ExitUnavailable, err)
	case errclass.Invalid:
		return exit(ExitUsage, err)
	case errclass.Internal:
		return exit(ExitInternal, err)
	}
	// Worker protocol errors that are the caller's mistake.
	var we *wire.Error
	if errors.As(err, &we) && (we.Code == wire.CodeOutside || we.Code == wire.CodeNotFound || we.Code == wire.CodeProtocol) {
		return exit(ExitUsage, err)
	}
	return exit(ExitFailure, err)
}

// app is shared by all subcommands of one invocation.
type app struct {
	stdio Stdio
	// userConfig overrides the user config path (--config).
	userConfig string
	// labels are added to containers vak creates (tests set vak.test=1).
	labels map[string]string
}

func (a *app) warnf(format string, args ...any) {
	fmt.Fprintf(a.stdio.Err, "vak: warning: "+format+"\n", args...)
}

// warn prints one warning (launch.Request.Warn).
func (a *app) warn(msg string) { a.warnf("%s", msg) }

// loadConfig loads config for workspace (may be empty), printing warnings.
func (a *app) loadConfig(workspace string) (*config.Config, error) {
	cfg, err := config.Load(config.Options{UserFile: a.userConfig, Workspace: workspace})
	if err != nil {
		if errors.Is(err, config.ErrInvalid) {
			return nil, exit(ExitConfig, err)
		}
		return nil, exit(ExitConfig, fmt.Errorf("config: %w", err))
	}
	for _, w := range cfg.Warnings {
		a.warnf("%s", w)
	}
	return cfg, nil
}

// Main runs vak with args (without the program name) and returns the exit status.
func Main(ctx context.Context, args []string, stdio Stdio) int {
	if stdio.In == nil {
		stdio.In = os.Stdin
	}
	// This program is also the re-executed worker: its entry points.
	launch.RegisterWorkers()
	a := &app{stdio: stdio}
	var root *cobra.Command
	if len(args) > 0 && args[0] == sandbox.WorkerCommand {
		// The re-executed worker (every stage of every sandboxed run)
		// needs only its own command: building the whole tree is start-up
		// time paid once per process.
		root = a.newWorkerRoot()
	} else {
		root = a.newRoot()
	}
	root.SetArgs(args)
	root.SetIn(stdio.In)
	root.SetOut(stdio.Out)
	root.SetErr(stdio.Err)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stdio.Err, "vak: %v\n", ee.err)
		}
		return ee.code
	}
	// Anything else comes from cobra's flag and argument parsing.
	fmt.Fprintf(stdio.Err, "vak: %v\nRun 'vak --help' for usage.\n", err)
	return ExitUsage
}

func (a *app) newRoot() *cobra.Command {
	root := a.bareRoot()
	root.Long = `vak runs the commands of AI coding agents in a sandbox: no writes outside the
workspace, no reads of host secrets, no network except what policy allows.

On Linux the default sandbox is Landlock (no daemon needed); Docker is
available as a backend everywhere. Configuration lives in
$XDG_CONFIG_HOME/vak/config.toml (trusted) and <workspace>/.vak/config.toml
(untrusted: privileged keys are ignored, and it may only narrow).`
	root.AddCommand(
		a.newRunCmd(),
		a.newDoctorCmd(),
		a.newVersionCmd(),
		a.newMCPCmd(),
		a.newCompletionCmd(),
	)
	root.AddCommand(a.sessionCommands()...)
	root.AddCommand(a.newGatewayCmd(), a.newLoginCmd(), a.newReceiptsCmd(), a.newDevcontainerCmd(), a.newAgentnetCmd(), a.newUICmd())
	root.AddCommand(internalCommands(
		a.newWorkerCmd(),
		a.newNetclientCmd(),
		a.newDockerguardCmd(),
		a.newHashFilesCmd(),
		hiddenCmd(keeper.Command+" WORKSPACE", "Keep a large workspace's watch for the next cold runs (started by vak run)", func(cmd *cobra.Command, ws string) error {
			return keeper.Run(cmd.Context(), ws)
		}),
	)...)
	return root
}

// internalCommands hides cmds from `vak --help` and from shell completion:
// they are entry points vak starts itself (the re-executed worker, the
// proxied topology's netclient container, the nested engine's guard, a
// session's snapshot hasher), never typed by users. Hidden commands still
// run. The internal subcommands of user commands (`vak gateway
// serve-native`, `vak __reap` among the session commands, ...) are
// hidden where they are defined.
func internalCommands(cmds ...*cobra.Command) []*cobra.Command {
	for _, c := range cmds {
		c.Hidden = true
	}
	return cmds
}

// newWorkerRoot is the root of a re-executed worker (`vak __worker`): the
// same root with the worker's command only.
func (a *app) newWorkerRoot() *cobra.Command {
	root := a.bareRoot()
	root.AddCommand(a.newWorkerCmd())
	return root
}

// bareRoot is the root command without subcommands.
func (a *app) bareRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "vak",
		Short:         "Run the commands of AI coding agents in a sandbox",
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	root.PersistentFlags().StringVar(&a.userConfig, "config", "", "user config file (default $XDG_CONFIG_HOME/vak/config.toml)")
	return root
}
