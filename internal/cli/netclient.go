package cli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/netfence"
)

// ReadyFile is created by `vak netclient` once its rules are verified and the
// forwarder listens; the container's health check looks for it (through
// `vak netclient --check`).
const ReadyFile = "/run/vak-netclient.ready"

// DefaultVerifyInterval is how often the running netclient re-verifies its
// rules; tampering makes it exit (fail closed: the forwarder is gone, and
// Docker then removes the namespace's interface).
const DefaultVerifyInterval = 2 * time.Second

func (a *app) newNetclientCmd() *cobra.Command {
	var (
		gateway string
		nested  string
		check   bool
		joined  bool
		every   time.Duration
		c       = netfence.Config{
			TransparentPort: netfence.DefaultTransparentPort,
			ProxyPort:       netfence.DefaultProxyPort,
			DNSPort:         netfence.DefaultDNSPort,
			ForwarderPort:   netfence.DefaultForwarderPort,
		}
	)
	cmd := &cobra.Command{
		Use:   "netclient --gateway IP",
		Short: "Fence this network namespace so that traffic leaves only through the gateway",
		Long: `Program nftables in the current network namespace (the netclient container
of a proxied sandbox, which the sandboxed containers join) so that every TCP
connection goes to a local forwarder that relays it to the gateway behind a
PROXY v2 header, DNS goes to the gateway's resolver, and everything else is
dropped. Needs CAP_NET_ADMIN. Reports ready (` + ReadyFile + `) only after the
rules are verified in place; exits if they are ever changed.

With --nested-pool, nested mode: a Docker engine will run in this namespace
with its bridges in that pool; their traffic is captured the same way (a
prerouting NAT chain, a forward chain that lets nothing but DNS out, and a
drop of outside packets to 127.0.0.0/8). See docs/nested-docker.md.

With --check, only verify the rules and readiness (for health checks); give it
the same --nested-pool/--uplink as the running netclient. With --check
--joined, check from another container that joined the netclient's namespace
(a dev container's dockerd): the rules verify, the uplink is up with an
address, and the gateway's DNS port accepts a TCP connection; this fails in a
namespace whose netclient is gone (no uplink left).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := netip.ParseAddr(gateway)
			if err != nil {
				return exit(ExitUsage, fmt.Errorf("--gateway: %w", err))
			}
			c.Gateway = addr
			if nested != "" {
				if c.NestedPool, err = netip.ParsePrefix(nested); err != nil {
					return exit(ExitUsage, fmt.Errorf("--nested-pool: %w", err))
				}
			}
			if err := c.Validate(); err != nil {
				return exit(ExitUsage, err)
			}
			if joined && !check {
				return exit(ExitUsage, errors.New("--joined needs --check"))
			}
			if check {
				if err := netfence.Verify(c); err != nil {
					return exit(ExitFailure, err)
				}
				if joined {
					if err := netfence.CheckJoined(c, 3*time.Second); err != nil {
						return exit(ExitFailure, err)
					}
					return nil
				}
				if _, err := os.Stat(ReadyFile); err != nil {
					return exit(ExitFailure, errors.New("netclient not ready"))
				}
				return nil
			}
			if every <= 0 {
				return exit(ExitUsage, errors.New("--verify-interval must be positive"))
			}
			return a.netclient(c, every)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&gateway, "gateway", "", "gateway address on the sandbox network (required)")
	fl.Uint16Var(&c.TransparentPort, "transparent-port", c.TransparentPort, "gateway port that takes PROXY v2 connections")
	fl.Uint16Var(&c.ProxyPort, "proxy-port", c.ProxyPort, "gateway explicit proxy port")
	fl.Uint16Var(&c.DNSPort, "dns-port", c.DNSPort, "gateway DNS port")
	fl.Uint16Var(&c.ForwarderPort, "forward-port", c.ForwarderPort, "local forwarder port")
	fl.StringVar(&nested, "nested-pool", "", "nested mode: the inner Docker engine's IPv4 address pool (e.g. "+netfence.DefaultNestedPool.String()+")")
	fl.StringVar(&c.Uplink, "uplink", netfence.DefaultUplink, "nested mode: the interface toward the sandbox network")
	fl.BoolVar(&check, "check", false, "only verify that the fence is in place")
	fl.BoolVar(&joined, "joined", false, "with --check: from a container that joined the namespace (no ready file; the uplink and the gateway must answer)")
	fl.DurationVar(&every, "verify-interval", DefaultVerifyInterval, "how often to re-verify the rules (exit if they changed)")
	cmd.MarkFlagRequired("gateway")
	cmd.AddCommand(a.newUnfenceCmd(), a.newSelfTestCmd())
	return cmd
}

// newSelfTestCmd probes the fence from inside the sandbox namespace (run
// by proxynet in the netclient container when a topology comes up and
// after a gateway restart). It prints one line per check and exits 1 if
// any failed; the caller also checks the gateway's canary for the nonce.
func (a *app) newSelfTestCmd() *cobra.Command {
	var (
		gateway, nonce, denied, sinkhole, resolver, nested string
		targets                                            []string
		timeout                                            time.Duration
		st                                                 = netfence.SelfTest{Config: netfence.Config{
			TransparentPort: netfence.DefaultTransparentPort,
			ProxyPort:       netfence.DefaultProxyPort,
			DNSPort:         netfence.DefaultDNSPort,
			ForwarderPort:   netfence.DefaultForwarderPort,
		}}
	)
	cmd := &cobra.Command{
		Use:    "selftest --gateway IP --target IP:PORT... --nonce N",
		Short:  "Prove the fence from inside the sandbox namespace",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if st.Gateway, err = netip.ParseAddr(gateway); err != nil {
				return exit(ExitUsage, fmt.Errorf("--gateway: %w", err))
			}
			for _, t := range targets {
				ap, err := netip.ParseAddrPort(t)
				if err != nil {
					return exit(ExitUsage, fmt.Errorf("--target: %w", err))
				}
				st.Targets = append(st.Targets, ap)
			}
			if sinkhole != "" {
				if st.Sinkhole, err = netip.ParseAddr(sinkhole); err != nil {
					return exit(ExitUsage, fmt.Errorf("--sinkhole: %w", err))
				}
			}
			if st.Resolver, err = netip.ParseAddrPort(resolver); err != nil {
				return exit(ExitUsage, fmt.Errorf("--resolver: %w", err))
			}
			if nested != "" {
				if st.NestedPool, err = netip.ParsePrefix(nested); err != nil {
					return exit(ExitUsage, fmt.Errorf("--nested-pool: %w", err))
				}
			}
			st.Nonce, st.DeniedName, st.Timeout = nonce, denied, timeout
			report, err := st.Run(cmd.Context())
			for _, l := range report {
				fmt.Fprintln(a.stdio.Out, l)
			}
			if err != nil {
				return exit(ExitFailure, fmt.Errorf("fence self-test: %w", err))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&gateway, "gateway", "", "gateway address on the sandbox network")
	fl.StringArrayVar(&targets, "target", nil, "canary address IP:PORT to probe (repeatable)")
	fl.StringVar(&nonce, "nonce", "", "marks this run's payloads")
	fl.StringVar(&denied, "denied-name", "", "a name no rule allows")
	fl.StringVar(&sinkhole, "sinkhole", "", "the expected block answer for it (empty: NXDOMAIN)")
	fl.StringVar(&resolver, "resolver", "127.0.0.11:53", "the namespace's DNS server")
	fl.StringVar(&nested, "nested-pool", "", "the running netclient's nested pool (its rules are verified in nested mode)")
	fl.StringVar(&st.Uplink, "uplink", netfence.DefaultUplink, "nested mode: the interface toward the sandbox network")
	fl.DurationVar(&timeout, "timeout", 2*time.Second, "bound of each probe")
	return cmd
}

// newUnfenceCmd is for tests of the topology: it does what an attacker with
// NET_ADMIN in the sandbox namespace would do first (flush the rules), to
// show that nothing gets out anyway.
func (a *app) newUnfenceCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "unfence",
		Short:  "Flush this namespace's rules: a tamper test",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := netfence.Unfence(); err != nil {
				return exit(ExitFailure, err)
			}
			fmt.Fprintln(a.stdio.Out, "unfenced")
			return nil
		},
	}
}

func (a *app) netclient(c netfence.Config, every time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := netfence.Run(ctx, c, netfence.RunOptions{VerifyEvery: every, ReadyFile: ReadyFile, Out: a.stdio.Out}); err != nil {
		return exit(ExitFailure, err)
	}
	return nil
}
