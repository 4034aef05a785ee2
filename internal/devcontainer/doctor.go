package devcontainer

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/proxynet"
)

// Services of the template, in start order (DockerServices: --docker).
var (
	Services       = []string{"gateway", "netclient", "app"}
	DockerServices = []string{"gateway", "netclient", "dockerd", "app"}
)

// Status is the state of a workspace's dev-container services.
type Status struct {
	Key      string
	Docker   bool                          // the --docker variant
	Services map[string]*container.Summary // nil entries: no container
	Health   map[string]string             // service -> health ("" = none)
	App      *container.Summary
	// Stale names the services (dockerd, app) whose container joined a
	// netclient namespace that is no longer the running one (only
	// loopback is left in it), with the reason.
	Stale map[string]string
	// Files are the problems of the template's files (CheckFiles): the
	// next Reopen in Container would not run the template as vak wrote it.
	Files []error
}

// services are st's services, in start order.
func (st *Status) services() []string {
	if st.Docker {
		return DockerServices
	}
	return Services
}

// joiners are the services that join the netclient's namespace.
func (st *Status) joiners() []string {
	if st.Docker {
		return []string{"dockerd", "app"}
	}
	return []string{"app"}
}

func serviceContainer(ctx context.Context, cli *client.Client, key, svc string) (*container.Summary, error) {
	f := make(client.Filters).Add("label", LabelKey+"="+key, "com.docker.compose.service="+svc)
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("devcontainer: list %s: %w", svc, err)
	}
	if len(res.Items) == 0 {
		return nil, fmt.Errorf("devcontainer: no %s container", svc)
	}
	c := res.Items[0]
	return &c, nil
}

// Inspect reads the state of the workspace's services and checks its
// template's files (CheckFiles).
func Inspect(ctx context.Context, cli *client.Client, ws string) (*Status, error) {
	st := &Status{Key: proxynet.Key(ws), Docker: hasDockerd(ws), Services: map[string]*container.Summary{}, Health: map[string]string{}, Stale: map[string]string{}, Files: CheckFiles(ws)}
	for _, svc := range st.services() {
		c, err := serviceContainer(ctx, cli, st.Key, svc)
		if err != nil {
			if strings.Contains(err.Error(), "no "+svc) {
				st.Services[svc] = nil
				continue
			}
			return nil, err
		}
		st.Services[svc] = c
		if ins, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{}); err == nil && ins.Container.State != nil && ins.Container.State.Health != nil {
			st.Health[svc] = string(ins.Container.State.Health.Status)
		}
	}
	for _, svc := range st.joiners() {
		if st.Services[svc] == nil {
			continue
		}
		problem, err := st.staleness(ctx, cli, st.Services[svc])
		if err != nil {
			return nil, fmt.Errorf("devcontainer: inspect %s: %w", svc, err)
		}
		if problem != "" {
			st.Stale[svc] = problem
		}
	}
	st.App = st.Services["app"]
	return st, nil
}

// staleness says why c is not in the running netclient's namespace ("" if
// it is).
func (st *Status) staleness(ctx context.Context, cli *client.Client, c *container.Summary) (string, error) {
	ins, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
	if err != nil {
		return "", err
	}
	mode := string(ins.Container.HostConfig.NetworkMode)
	joined, _ := strings.CutPrefix(mode, "container:")
	nc := st.Services["netclient"]
	switch {
	case !strings.HasPrefix(mode, "container:"):
		return "network mode " + mode + ", not the netclient's namespace", nil
	case nc == nil:
		return "its netclient " + short(joined) + " is gone", nil
	case joined != nc.ID:
		return "it joined netclient " + short(joined) + ", the running one is " + short(nc.ID), nil
	case nc.State != container.StateRunning:
		return "its netclient " + short(nc.ID) + " is " + string(nc.State), nil
	}
	// A netclient that stopped and started again has a new namespace; the
	// container still holds the old one.
	if nci, err := cli.ContainerInspect(ctx, nc.ID, client.ContainerInspectOptions{}); err == nil && nci.Container.State != nil && ins.Container.State != nil {
		ncStart, e1 := time.Parse(time.RFC3339Nano, nci.Container.State.StartedAt)
		start, e2 := time.Parse(time.RFC3339Nano, ins.Container.State.StartedAt)
		if e1 == nil && e2 == nil && ncStart.After(start) {
			return "its netclient " + short(nc.ID) + " restarted after it", nil
		}
	}
	return "", nil
}

// Problems lists what is wrong, one line each (empty: all healthy): the
// template's files first, then the services.
func (st *Status) Problems() []string {
	var p []string
	for _, err := range st.Files {
		p = append(p, strings.TrimPrefix(err.Error(), ErrBroken.Error()+": "))
	}
	for _, svc := range st.services() {
		c := st.Services[svc]
		switch {
		case c == nil:
			p = append(p, svc+": no container (run devcontainer up, or Reopen in Container)")
		case c.State != container.StateRunning:
			p = append(p, fmt.Sprintf("%s: %s (%s)", svc, c.State, c.Status))
		case st.Health[svc] != "" && st.Health[svc] != "healthy":
			p = append(p, fmt.Sprintf("%s: health %s", svc, st.Health[svc]))
		}
	}
	for _, svc := range st.joiners() {
		if problem := st.Stale[svc]; problem != "" {
			p = append(p, svc+": in a dead network namespace ("+problem+"): the next devcontainer up (Reopen in Container / Rebuild) recreates it")
		}
	}
	return p
}

// Report writes one line per service and the problems.
func (st *Status) Report(w io.Writer) {
	fmt.Fprintf(w, "dev container %s: gateway %s, sandbox subnet %s\n", st.Key, GatewayIP(st.Key), Subnet(st.Key))
	for _, svc := range st.services() {
		c := st.Services[svc]
		if c == nil {
			fmt.Fprintf(w, "  %-9s absent\n", svc)
			continue
		}
		h := st.Health[svc]
		if h == "" {
			h = "no health check"
		}
		fmt.Fprintf(w, "  %-9s %s %s, %s (%s)\n", svc, short(c.ID), c.State, h, c.Status)
	}
	for _, p := range st.Problems() {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
}

// SelfTest proves the running template's fence as `vak run --network
// proxied` does before a sandbox joins (proxynet's fence self-test: direct
// TCP/UDP to the gateway's canary on both its addresses must not arrive,
// denied DNS is answered by the gateway, the rules verify), with the
// receipt in proxynet.SelfTestLog. st must come from Inspect with gateway
// and netclient running.
func (st *Status) SelfTest(ctx context.Context, o PrepareOptions) error {
	gw, nc := st.Services["gateway"], st.Services["netclient"]
	if gw == nil || nc == nil {
		return fmt.Errorf("devcontainer: fence self-test: gateway and netclient must be running")
	}
	ins, err := o.Engine.ContainerInspect(ctx, gw.ID, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("devcontainer: inspect gateway: %w", err)
	}
	var egressIP netip.Addr
	if ins.Container.NetworkSettings != nil {
		for name, ep := range ins.Container.NetworkSettings.Networks {
			n, err := o.Engine.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
			if err == nil && ep != nil && n.Network.Labels[LabelKey] == st.Key && n.Network.Labels["com.docker.compose.network"] == "egress" {
				egressIP = ep.IPAddress
			}
		}
	}
	if !egressIP.IsValid() {
		return fmt.Errorf("devcontainer: fence self-test: the gateway %s has no address on the template's egress network", short(gw.ID))
	}
	po := &proxynet.Options{Engine: o.Engine, StateDir: o.StateDir, ConfigFile: o.ConfigFile, Progress: o.Progress}
	return po.SelfTestContainers(ctx, st.Key, gw.ID, nc.ID, GatewayIP(st.Key), egressIP, o.Sections)
}
