package taskenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"time"

	"vak/internal/errclass"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// ExecOptions say how Manager.RunCommand runs a command of `vak session exec`
// beyond the Command itself.
type ExecOptions struct {
	// Arm, if set, is called once the command runs: the signal names it
	// returns go to the command (the first Ctrl-C of -i) until disarm.
	Arm func() (signals <-chan string, disarm func())
	// Root runs the command as root through docker exec (only in sessions
	// created with session.allow_install); its output then goes to Stdout
	// and Stderr, and the result carries the exit status only.
	Root           bool
	Stdout, Stderr io.Writer
	// Warn receives what went wrong delivering a signal under Root.
	Warn func(string)
}

// RunCommand runs c in session id: through its worker, or with o.Root through
// docker exec. The command is killed with its process tree on c.Timeout
// (the result says TimedOut) or when ctx ends (then ctx's error).
func (m *Manager) RunCommand(ctx context.Context, id string, c Command, o ExecOptions) (*Result, error) {
	if o.Root {
		return m.execDocker(ctx, id, c, o)
	}
	s, err := m.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if o.Arm != nil {
		var disarm func()
		c.Signal, disarm = o.Arm()
		defer disarm()
	}
	return s.Exec(ctx, c)
}

// execDocker runs c through docker exec without a terminal, with the
// signal and timeout rules of the worker path: the signals of o.Arm go to
// the command, c.Timeout or the end of ctx kill it. docker exec forwards
// no signal, so they are delivered in the container itself (SignalArgs),
// finding the command by a random token in its environment.
func (m *Manager) execDocker(ctx context.Context, id string, c Command, o ExecOptions) (*Result, error) {
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(rnd[:])
	env := maps.Clone(c.Env)
	if env == nil {
		env = map[string]string{}
	}
	env[ExecMarkerEnv] = token
	args, err := m.InteractiveArgs(ctx, id, c.Argv, c.Dir, env, nil, true)
	if err != nil {
		return nil, err
	}
	deliver := func(sig string, all bool) {
		if err := m.signalExec(context.WithoutCancel(ctx), id, token, sig, all); err != nil && o.Warn != nil {
			o.Warn(fmt.Sprintf("signal %s to the command: %v", sig, err))
		}
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	if c.StdinStream != nil {
		cmd.Stdin = c.StdinStream
	}
	// A stdin that is not a file is copied by a goroutine that may block
	// on a read after the command ended.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, errclass.Wrap(errclass.Unavailable, fmt.Errorf("docker exec: %w", err))
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
	if o.Arm != nil {
		var disarm func()
		sigs, disarm = o.Arm()
		defer disarm()
	}
	var timeout <-chan time.Time
	if c.Timeout > 0 {
		timer := time.NewTimer(c.Timeout)
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
			return dockerExecResult(err)
		case sig := <-sigs:
			deliver(sig, false)
		case <-timeout:
			kill()
			return &Result{TimedOut: true}, nil
		case <-ctx.Done():
			kill()
			return nil, ctx.Err()
		}
	}
}

// signalExec delivers sig to the docker exec command marked with token
// (all: to its whole process tree).
func (m *Manager) signalExec(ctx context.Context, id, token, sig string, all bool) error {
	sa, err := m.SignalArgs(ctx, id, token, sig, true, all)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(sctx, sa[0], sa[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// dockerExecResult is docker exec's outcome: the command's exit status,
// or an error (class Unavailable) when docker exec could not run.
func dockerExecResult(err error) (*Result, error) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &Result{ExitCode: ee.ExitCode()}, nil
	}
	if err != nil {
		return nil, errclass.Wrap(errclass.Unavailable, fmt.Errorf("docker exec: %w", err))
	}
	return &Result{}, nil
}

// RunDockerCLI runs the `docker exec -it` args of InteractiveArgs on the
// caller's own terminal (the docker CLI sets it raw itself).
func RunDockerCLI(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (*Result, error) {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	return dockerExecResult(cmd.Run())
}

// Relay is the caller's side of a terminal relayed to a command's own:
// its input (raw), its size at the start and its changes.
type Relay struct {
	Stdin  io.Reader
	Size   wire.TTYSize
	Resize <-chan wire.TTYSize
}

// RelayDockerExec runs the `docker exec -it` args of InteractiveArgs on a
// terminal of vak's own, started raw (worker.Exec.RawTerminal), relayed
// to r: keys typed before either terminal was raw reach the command as
// typed (a docker CLI on the caller's terminal would find them cooked, an
// end of input turned into a NUL). The end of ctx kills the docker CLI.
func RelayDockerExec(ctx context.Context, args []string, r Relay, out io.Writer) (*Result, error) {
	in := worker.NewInteraction(r.Size)
	go in.Feed(r.Stdin)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case sz := <-r.Resize:
				in.Resize(sz)
			case <-done:
				return
			}
		}
	}()
	x := &worker.Exec{Workspace: "/", Env: os.Environ(), NoTripwire: true, RawTerminal: true}
	sz := r.Size
	res, err := x.BashArgvInteractive(ctx, args, wire.BashArgs{TTY: &sz}, in, func(_ string, data []byte) { out.Write(data) })
	if err != nil {
		return nil, errclass.Wrap(errclass.Unavailable, fmt.Errorf("docker exec: %w", err))
	}
	return res, nil
}
