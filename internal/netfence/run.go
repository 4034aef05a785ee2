package netfence

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"
)

// RunOptions configure Run.
type RunOptions struct {
	// VerifyEvery is how often the rules are re-verified (required).
	VerifyEvery time.Duration
	// ReadyFile, if set, exists exactly while the fence is verified and the
	// forwarder serves (the container's health check looks for it).
	ReadyFile string
	// Out receives the ready line (may be nil).
	Out io.Writer
	// SelfTest, if set, runs once the rules are in place and the
	// forwarder serves, before the namespace is reported ready; its
	// failure stops the netclient (the pod fence's self-test).
	SelfTest func(ctx context.Context) error
}

// Run is the netclient: it disables IPv6, applies the rules for c, serves
// the forwarder to the gateway and re-verifies the rules every
// o.VerifyEvery. It returns nil when ctx ends, and an error when the
// forwarder stops or the rules changed (it stops then: fail closed, the
// container's restart re-applies them).
func Run(ctx context.Context, c Config, o RunOptions) error {
	if o.VerifyEvery <= 0 {
		return fmt.Errorf("netclient: the verify interval must be positive")
	}
	if o.ReadyFile != "" {
		os.Remove(o.ReadyFile)
	}
	if !c.Pod {
		if err := DisableIPv6(); err != nil {
			return err
		}
	}
	if err := Apply(c); err != nil {
		return err
	}
	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", c.ForwarderPort))
	if err != nil {
		return fmt.Errorf("netclient: forwarder: %w", err)
	}
	f := &Forwarder{Gateway: netip.AddrPortFrom(c.Gateway, c.TransparentPort)}
	stop := func() {
		ln.Close()
		f.Close()
	}
	served := make(chan error, 1)
	go func() { served <- f.Serve(ln) }()
	if o.SelfTest != nil {
		if err := o.SelfTest(ctx); err != nil {
			stop()
			return err
		}
	}
	if o.ReadyFile != "" {
		if err := os.WriteFile(o.ReadyFile, []byte("ready\n"), 0o644); err != nil {
			stop()
			return err
		}
	}
	if o.Out != nil {
		fmt.Fprintf(o.Out, "netclient: ready: TCP via %v:%d, DNS via %v:%d, everything else dropped\n", c.Gateway, c.TransparentPort, c.Gateway, c.DNSPort)
	}
	tick := time.NewTicker(o.VerifyEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			stop()
			return nil
		case err := <-served:
			return fmt.Errorf("netclient: forwarder stopped: %w", err)
		case <-tick.C:
			if err := Verify(c); err != nil {
				if o.ReadyFile != "" {
					os.Remove(o.ReadyFile)
				}
				stop()
				return fmt.Errorf("netclient: rules changed, stopping (fail closed): %w", err)
			}
		}
	}
}
