package devcontainer

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/proxynet"
)

// Services of the template, in start order.
var Services = []string{"gateway", "netclient", "app"}

// Status is the state of a workspace's dev-container services.
type Status struct {
	Key      string
	Services map[string]*container.Summary // nil entries: no container
	Health   map[string]string             // service -> health ("" = none)
	App      *container.Summary
	// AppStale is set when the agent's container joined a netclient that
	// is no longer the running one (only loopback is left in it).
	AppStale   bool
	AppProblem string
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

// Inspect reads the state of the workspace's services.
func Inspect(ctx context.Context, cli *client.Client, ws string) (*Status, error) {
	st := &Status{Key: proxynet.Key(ws), Services: map[string]*container.Summary{}, Health: map[string]string{}}
	for _, svc := range Services {
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
	st.App = st.Services["app"]
	if st.App != nil {
		ins, err := cli.ContainerInspect(ctx, st.App.ID, client.ContainerInspectOptions{})
		if err != nil {
			return nil, fmt.Errorf("devcontainer: inspect app: %w", err)
		}
		mode := string(ins.Container.HostConfig.NetworkMode)
		joined, _ := strings.CutPrefix(mode, "container:")
		nc := st.Services["netclient"]
		switch {
		case !strings.HasPrefix(mode, "container:"):
			st.AppStale, st.AppProblem = true, "network mode "+mode+", not the netclient's namespace"
		case nc == nil:
			st.AppStale, st.AppProblem = true, "its netclient "+short(joined)+" is gone"
		case joined != nc.ID:
			st.AppStale, st.AppProblem = true, "it joined netclient "+short(joined)+", the running one is "+short(nc.ID)
		}
	}
	return st, nil
}

// Problems lists what is wrong, one line each (empty: all healthy).
func (st *Status) Problems() []string {
	var p []string
	for _, svc := range Services {
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
	if st.AppStale {
		p = append(p, "app: in a dead network namespace ("+st.AppProblem+"): the next devcontainer up (Reopen in Container / Rebuild) recreates it")
	}
	return p
}

// Report writes one line per service and the problems.
func (st *Status) Report(w io.Writer) {
	fmt.Fprintf(w, "dev container %s: gateway %s, sandbox subnet %s\n", st.Key, GatewayIP(st.Key), Subnet(st.Key))
	for _, svc := range Services {
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
