package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"vak/internal/egress/admin"
	"vak/internal/egress/ondemand"
	"vak/internal/paths"
	"vak/internal/sandbox"
)

// StopOnDemandGateway is vak gc's part for native proxied runs: it stops
// the user's on-demand gateway unless a run holds it, saying so on out;
// warn is told what failed.
func StopOnDemandGateway(ctx context.Context, out io.Writer, warn func(string)) {
	state, err := paths.StateDir()
	if err != nil {
		return
	}
	stopped, err := ondemand.Stop(ctx, state)
	switch {
	case errors.Is(err, ondemand.ErrInUse):
	case err != nil:
		warn(fmt.Sprintf("on-demand gateway: %v", err))
	case stopped:
		fmt.Fprintf(out, "stopped the on-demand gateway of native proxied runs: no run uses it\n")
	}
}

// ProxiedHow says, for vak doctor, how b would attach a proxied network
// and the state of the on-demand gateway a fence would use.
func ProxiedHow(ctx context.Context, b sandbox.Backend) string {
	kind, err := sandbox.ProxiedNetwork(b)
	if err != nil {
		return err.Error()
	}
	if kind == sandbox.NetworkTopology {
		return "the workspace's Docker topology"
	}
	state, err := paths.StateDir()
	if err != nil {
		return "a fenced namespace toward the on-demand gateway: " + err.Error()
	}
	p := ondemand.Layout(state)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := admin.NewClient(p.Admin).Status(ctx); err != nil {
		return "a fenced namespace toward the on-demand gateway in " + p.Dir + ", not running: the next proxied run starts it"
	}
	return "a fenced namespace toward the on-demand gateway in " + p.Dir + ", running"
}
