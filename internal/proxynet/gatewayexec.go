package proxynet

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/paths"
)

// ErrNoGateway means the workspace has no gateway container running.
var ErrNoGateway = errors.New("proxynet: no proxied network is running for the workspace")

// ExecGateway runs `vak gateway ARGS --socket <its admin socket>` in the
// gateway container of the canonical workspace ws (the ask commands for a
// docker-backed workspace: its admin socket is in the container's
// volume), with the command's output to stdout and stderr.
func ExecGateway(ctx context.Context, eng *engine.Client, ws string, stdout, stderr io.Writer, args ...string) error {
	_, _, gw, _, _ := names(Key(ws))
	ins, err := eng.ContainerInspect(ctx, gw, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State == nil || !ins.Container.State.Running {
		return fmt.Errorf("%w: %s (a proxied vak run or session there starts one)", ErrNoGateway, ws)
	}
	cmd := append(append([]string{"/vak", "gateway"}, args...), "--socket", paths.GatewayAdminSocket(gatewayStateDir))
	return engine.Exec(ctx, eng, gw, stdout, stderr, cmd...)
}
