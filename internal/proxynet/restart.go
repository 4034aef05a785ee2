package proxynet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/egress/egressconfig"
	"vak/internal/errclass"
)

// LabelNetclient, on a sandbox container, is the ID of the netclient
// container whose namespace it joined: a netclient of the same name made
// later is another namespace, which the sandbox is not in.
const LabelNetclient = "vak.proxynet.netclient"

// ErrInUse reports a topology that is down while sandbox containers still
// use it: it is not rebuilt under them.
var ErrInUse = errclass.New(errclass.Unavailable, "proxynet: the proxied network is down and still in use")

// liveUsers returns the running sandbox containers joined to key's topology.
func liveUsers(ctx context.Context, cli *client.Client, key string) ([]string, error) {
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", LabelClientOf+"="+key)})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range res.Items {
		name := c.ID[:12]
		if len(c.Names) > 0 {
			name = c.Names[0][1:]
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

// recover brings a topology whose gateway stopped back without touching the
// netclient, whose namespace live sandboxes share: it starts the gateway
// container again (same volume: same CA, receipts chain and placeholders),
// checks that it came back at the address the netclient's fence points to,
// and hands over only after a fresh self-test (reuse). Rebuilding instead
// would remove the netclient and cut every joined sandbox off for good.
func (o *Options) recover(ctx context.Context, key string, sections *egressconfig.Sections) (*Net, error) {
	_, sandboxNet, gwName, ncName, _ := names(key)
	cli := o.Engine
	nc, err := cli.ContainerInspect(ctx, ncName, client.ContainerInspectOptions{})
	if err != nil || nc.Container.State == nil || !nc.Container.State.Running {
		return nil, errors.New("the netclient is not running (the sandboxes' network is gone)")
	}
	want, err := fenceGateway(nc.Container.Config)
	if err != nil {
		return nil, err
	}
	gw, err := cli.ContainerInspect(ctx, gwName, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, errors.New("the gateway container was removed")
		}
		return nil, err
	}
	if gw.Container.State == nil || !gw.Container.State.Running {
		o.progressf("restarting the egress gateway of %s (the joined sandboxes keep their network)", o.Workspace)
		if _, err := cli.ContainerStart(ctx, gwName, client.ContainerStartOptions{}); err != nil {
			return nil, fmt.Errorf("start the gateway: %w", err)
		}
	}
	if err := waitHealthy(ctx, cli, gwName); err != nil {
		return nil, err
	}
	got, err := addressOn(ctx, cli, gwName, sandboxNet)
	if err != nil {
		return nil, err
	}
	if got != want {
		return nil, fmt.Errorf("the gateway came back at %v, but the fence points to %v", got, want)
	}
	return o.reuse(ctx, key, sections)
}

// fenceGateway reads the gateway address a netclient was started with.
func fenceGateway(cfg *container.Config) (netip.Addr, error) {
	if cfg != nil {
		for i, a := range cfg.Cmd {
			if a == "--gateway" && i+1 < len(cfg.Cmd) {
				return netip.ParseAddr(cfg.Cmd[i+1])
			}
		}
	}
	return netip.Addr{}, errors.New("the netclient has no --gateway")
}

// NetworkState describes, for `vak session ls`, the proxied network of a
// sandbox container with labels: "" when it has none, "ok", or what is
// wrong ("gone: ..." when the sandbox has lost it for good, "down: ..."
// when the next proxied run or session create can bring it back).
func NetworkState(ctx context.Context, cli *client.Client, labels map[string]string) string {
	key := labels[LabelClientOf]
	if key == "" {
		return ""
	}
	_, _, gwName, ncName, _ := names(key)
	nc, err := cli.ContainerInspect(ctx, ncName, client.ContainerInspectOptions{})
	switch {
	case err != nil:
		return "gone: netclient removed"
	case nc.Container.State == nil || !nc.Container.State.Running:
		return "gone: netclient stopped"
	case labels[LabelNetclient] != "" && labels[LabelNetclient] != nc.Container.ID:
		return "gone: the topology was rebuilt"
	}
	switch {
	case !healthy(ctx, cli, gwName):
		return "down: gateway not running"
	}
	return "ok"
}
