package engine

import (
	"context"
	"fmt"
	"io"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// ExitError is Exec's error for a command that ran and exited non-zero.
type ExitError struct {
	Container string   // the container the command ran in
	Cmd       []string // the command
	Code      int      // its exit status
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%s in container %s: exit status %d", e.Cmd[0], e.Container, e.Code)
}

// Exec runs cmd (an argv, no shell) in the running container (a name or
// ID) through the Engine API, copies its stdout and stderr to the writers
// (nil discards; the same writer for both interleaves them as they came),
// and waits for it. A command that exits non-zero is an *ExitError; a
// failed API call is APIError's error naming the container and the command.
// It is vak's one exec helper.
func Exec(ctx context.Context, cli *Client, container string, stdout, stderr io.Writer, cmd ...string) error {
	if len(cmd) == 0 {
		return fmt.Errorf("engine: exec in container %s: empty command", container)
	}
	what := fmt.Sprintf("exec %s in container %s", cmd[0], container)
	ex, err := cli.ExecCreate(ctx, container, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return APIError(what, err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return APIError(what, err)
	}
	defer att.Close()
	if _, err := stdcopy.StdCopy(orDiscard(stdout), orDiscard(stderr), att.Reader); err != nil {
		return fmt.Errorf("%s: output: %w", what, err)
	}
	ins, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		return APIError(what, err)
	}
	if ins.ExitCode != 0 {
		return &ExitError{Container: container, Cmd: cmd, Code: ins.ExitCode}
	}
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
