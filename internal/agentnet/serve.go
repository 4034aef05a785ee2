package agentnet

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
)

// Serve is `vak agentnet serve`: Run until ctx ends or SIGINT or SIGTERM
// arrives. A SIGHUP makes the running broker re-read its policies (as
// `vak agentnet reload` does); warn is told a reload that failed.
func Serve(ctx context.Context, o RunOptions, warn func(string)) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if err := NewClient(o.Dir).Reload(ctx); err != nil {
				warn(fmt.Sprintf("agentnet reload: %v", err))
			}
		}
	}()
	return Run(ctx, o)
}

// WriteEdges writes es as `vak agentnet edges` shows them: a table of both
// workspaces, the edge's state and why.
func WriteEdges(w io.Writer, es []EdgeStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKSPACE A\tWORKSPACE B\tSTATE\tWHY")
	for _, e := range es {
		st := "down"
		if e.Up {
			st = "up"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.A, e.B, st, e.Reason)
	}
	return tw.Flush()
}
