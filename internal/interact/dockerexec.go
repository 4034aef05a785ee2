package interact

import (
	"context"
	"errors"

	"vak/internal/taskenv"
)

// ErrInterrupted is returned when SIGTERM or SIGHUP ended a relayed
// command (vak exits 130).
var ErrInterrupted = errors.New("interrupted; docker exec killed")

// DockerExec runs the `docker exec -it` args (taskenv.Manager.InteractiveArgs)
// and returns its exit status. Where vak allocates terminals (OwnTerminals)
// the docker CLI runs on a terminal of vak's own, relayed to the user's as
// `vak run -t` relays the sandbox's (taskenv.RelayDockerExec): keys typed
// before either terminal was raw reach the command as typed, and vak
// restores its terminal however the run ends. SIGTERM and SIGHUP kill the
// docker CLI (ErrInterrupted); Ctrl-C is a key typed into the container's
// terminal. Elsewhere the docker CLI runs on vak's terminal and sets it raw
// itself.
func DockerExec(ctx context.Context, args []string, std IO) (int, error) {
	if !OwnTerminals {
		res, err := taskenv.RunDockerCLI(ctx, args, std.In, std.Out, std.Err)
		if err != nil {
			return 0, err
		}
		return res.ExitCode, nil
	}
	sigctx, _, stopSignals := Notify(ctx)
	defer stopSignals()
	relay, err := StartRelay(std.In, std.Out)
	if err != nil {
		return 0, err
	}
	defer relay.Stop()
	res, err := taskenv.RelayDockerExec(sigctx, args, taskenv.Relay{Stdin: relay.Stdin, Size: relay.Size, Resize: relay.Resize}, std.Out)
	switch {
	case sigctx.Err() != nil && ctx.Err() == nil:
		return 0, ErrInterrupted
	case err != nil:
		return 0, err
	}
	return res.ExitCode, nil
}
