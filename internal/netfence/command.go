package netfence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"vak/internal/errclass"
)

// ReadyFile is created by `vak netclient` once its rules are verified and
// the forwarder listens; the container's health check looks for it
// (through `vak netclient --check`).
const ReadyFile = "/run/vak-netclient.ready"

// DefaultVerifyInterval is how often the running netclient re-verifies its
// rules; tampering makes it exit (fail closed: the forwarder is gone, and
// Docker then removes the namespace's interface).
const DefaultVerifyInterval = 2 * time.Second

// DefaultConfig is a Config with the default ports and no gateway yet.
func DefaultConfig() Config {
	return Config{
		TransparentPort: DefaultTransparentPort,
		ProxyPort:       DefaultProxyPort,
		DNSPort:         DefaultDNSPort,
		ForwarderPort:   DefaultForwarderPort,
	}
}

// Flags are the values of the `vak netclient` command line that Command
// parses into the Config: the gateway's address and the nested pool
// (empty: nested mode off) as written.
type Flags struct {
	Gateway, NestedPool string
	// Check only verifies the fence and readiness; Joined, with Check,
	// checks from a container that joined the namespace (CheckJoined).
	Check, Joined bool
	// VerifyEvery is the running netclient's re-verify interval.
	VerifyEvery time.Duration
	// Pod is the proxied fence of a Kubernetes session pod (Config.Pod):
	// the netclient also runs ProxiedPodSelfTest and writes its receipt
	// (one JSON line) before it reports ready.
	Pod bool
}

// Command is `vak netclient`: with f.Check it verifies the fence (and the
// ready file, or with f.Joined the uplink and the gateway) and returns;
// otherwise it runs the netclient (Run) until SIGTERM or SIGINT, writing
// its ready line to out. Errors in f are of class errclass.Invalid.
func Command(c Config, f Flags, out io.Writer) error {
	if err := f.apply(&c); err != nil {
		return errclass.Wrap(errclass.Invalid, err)
	}
	if f.Check {
		if err := Verify(c); err != nil {
			return err
		}
		if f.Joined {
			return CheckJoined(c, 3*time.Second)
		}
		if _, err := os.Stat(ReadyFile); err != nil {
			return errors.New("netclient not ready")
		}
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	o := RunOptions{VerifyEvery: f.VerifyEvery, ReadyFile: ReadyFile, Out: out}
	if c.Pod {
		o.SelfTest = func(ctx context.Context) error {
			rc, err := ProxiedPodSelfTest(ctx, c)
			if rc != nil {
				data, _ := json.Marshal(rc)
				fmt.Fprintf(out, "%s%s\n", PodReceiptPrefix, data)
			}
			return err
		}
	}
	return Run(ctx, c, o)
}

// PodReceiptPrefix starts the line of the proxied pod fence's receipt in
// the netclient's output (the sidecar's log, which vak keeps with the
// session).
const PodReceiptPrefix = "vak-fence-receipt: "

// apply parses f into c and checks the combination.
func (f Flags) apply(c *Config) error {
	var err error
	c.Pod = f.Pod
	if c.Gateway, err = netip.ParseAddr(f.Gateway); err != nil {
		return fmt.Errorf("--gateway: %w", err)
	}
	if f.NestedPool != "" {
		if c.NestedPool, err = netip.ParsePrefix(f.NestedPool); err != nil {
			return fmt.Errorf("--nested-pool: %w", err)
		}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if f.Joined && !f.Check {
		return errors.New("--joined needs --check")
	}
	if !f.Check && f.VerifyEvery <= 0 {
		return errors.New("--verify-interval must be positive")
	}
	return nil
}

// SelfTestFlags are the values of the `vak netclient selftest` command
// line that SelfTestCommand parses into the SelfTest, as written.
type SelfTestFlags struct {
	Gateway  string
	Targets  []string
	Sinkhole string // empty: NXDOMAIN expected
	Resolver string
	// NestedPool is the running netclient's nested pool (empty: none).
	NestedPool string
}

// SelfTestCommand is `vak netclient selftest`: it completes st from f, runs
// it (SelfTest.Run) and writes its report to out, one line per check. It
// fails when a check failed; errors in f are of class errclass.Invalid.
func SelfTestCommand(ctx context.Context, st SelfTest, f SelfTestFlags, out io.Writer) error {
	if err := f.apply(&st); err != nil {
		return errclass.Wrap(errclass.Invalid, err)
	}
	report, err := st.Run(ctx)
	for _, l := range report {
		fmt.Fprintln(out, l)
	}
	if err != nil {
		return fmt.Errorf("fence self-test: %w", err)
	}
	return nil
}

// apply parses f into st.
func (f SelfTestFlags) apply(st *SelfTest) error {
	var err error
	if st.Gateway, err = netip.ParseAddr(f.Gateway); err != nil {
		return fmt.Errorf("--gateway: %w", err)
	}
	for _, t := range f.Targets {
		ap, err := netip.ParseAddrPort(t)
		if err != nil {
			return fmt.Errorf("--target: %w", err)
		}
		st.Targets = append(st.Targets, ap)
	}
	if f.Sinkhole != "" {
		if st.Sinkhole, err = netip.ParseAddr(f.Sinkhole); err != nil {
			return fmt.Errorf("--sinkhole: %w", err)
		}
	}
	if st.Resolver, err = netip.ParseAddrPort(f.Resolver); err != nil {
		return fmt.Errorf("--resolver: %w", err)
	}
	if f.NestedPool != "" {
		if st.NestedPool, err = netip.ParsePrefix(f.NestedPool); err != nil {
			return fmt.Errorf("--nested-pool: %w", err)
		}
	}
	return nil
}
