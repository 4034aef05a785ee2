package proxynet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

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

// RunningGateways lists the canonical workspaces of this user's topologies
// whose gateway container is running (those ExecGateway reaches).
func RunningGateways(ctx context.Context, eng *engine.Client) ([]string, error) {
	f := make(client.Filters).Add("label", engine.LabelKind+"="+KindProxynet, engine.LabelOwner+"="+owner())
	cs, err := eng.ContainerList(ctx, client.ContainerListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("proxynet: list: %w", err)
	}
	var out []string
	for _, c := range cs.Items {
		_, _, gw, _, _ := names(c.Labels[LabelKey])
		ws := c.Labels[engine.LabelWorkspace]
		if ws != "" && slices.Contains(c.Names, "/"+gw) {
			out = append(out, ws)
		}
	}
	slices.Sort(out)
	return out, nil
}
