package dockerguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"

	"vak/internal/errclass"
)

// Flags are the values of the `vak dockerguard` command line (Args) that
// Command parses into the Policy: the pool, the DNS server, the labels
// and the variables as written.
type Flags struct {
	Pool, DNS string
	// Labels are KEY=VALUE; Env are NAME=VALUE.
	Labels, Env []string
}

// Command is `vak dockerguard`: it completes p from f, then serves it
// (Serve) in front of rawSocket until SIGTERM or SIGINT, writing the
// serving line to out once it listens. Errors in f are of class
// errclass.Invalid.
func Command(p Policy, f Flags, rawSocket string, out io.Writer) error {
	if err := f.apply(&p); err != nil {
		return errclass.Wrap(errclass.Invalid, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Serve(ctx, p, rawSocket, func() {
		fmt.Fprintf(out, "dockerguard: serving %s (reaper %s) -> %s\n", p.GuardSocket, p.ReaperSocket, rawSocket)
	})
}

// apply parses f into p's Pool, DNS, Labels and Env.
func (f Flags) apply(p *Policy) error {
	var err error
	if p.Pool, err = netip.ParsePrefix(f.Pool); err != nil {
		return fmt.Errorf("--pool: %w", err)
	}
	if p.DNS, err = netip.ParseAddr(f.DNS); err != nil {
		return fmt.Errorf("--dns: %w", err)
	}
	p.Labels = map[string]string{}
	for _, l := range f.Labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		p.Labels[k] = v
	}
	for _, kv := range f.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return errors.New("--env: want NAME=VALUE, got a value without a name or '='")
		}
	}
	p.Env = f.Env
	return nil
}
