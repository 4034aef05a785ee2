package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/netfence"
)

// newNetclientCmd is `vak netclient`, which vak starts itself (hidden).
// It programs nftables in the current network namespace (the netclient container
// of a proxied sandbox, which the sandboxed containers join) so that every TCP
// connection goes to a local forwarder that relays it to the gateway behind a
// PROXY v2 header, DNS goes to the gateway's resolver, and everything else is
// dropped. Needs CAP_NET_ADMIN. Reports ready (netfence.ReadyFile) only after the
// rules are verified in place; exits if they are ever changed.
//
// With --nested-pool, nested mode: a Docker engine will run in this namespace
// with its bridges in that pool; their traffic is captured the same way (a
// prerouting NAT chain, a forward chain that lets nothing but DNS out, and a
// drop of outside packets to 127.0.0.0/8). See docs/nested-docker.md.
//
// With --check, only verify the rules and readiness (for health checks); give it
// the same --nested-pool/--uplink as the running netclient. With --check
// --joined, check from another container that joined the netclient's namespace
// (a dev container's dockerd): the rules verify, the uplink is up with an
// address, and the gateway's DNS port accepts a TCP connection; this fails in a
// namespace whose netclient is gone (no uplink left).
//
// With --pod, the fence of a Kubernetes session pod, run by vak as the pod's
// vak-fence sidecar with the in-cluster gateway's Service address: no sysctl
// is set, IPv6 is dropped rather than disabled, connections opened toward the
// pod are dropped, and a self-test (its receipt one JSON line) runs before the
// pod is reported ready. See docs/kubernetes.md.
func (a *app) newNetclientCmd() *cobra.Command {
	var (
		f netfence.Flags
		c = netfence.DefaultConfig()
	)
	cmd := &cobra.Command{
		Use:   "netclient --gateway IP",
		Short: "Fence this network namespace so that traffic leaves only through the gateway",
		Long:  "Program nftables in this network namespace so that traffic leaves only through the gateway.\nvak starts it (hidden); docs/ARCHITECTURE.md, docs/nested-docker.md and docs/kubernetes.md describe it.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exitFor(netfence.Command(c, f, a.stdio.Out))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Gateway, "gateway", "", "gateway address on the sandbox network (required)")
	fl.Uint16Var(&c.TransparentPort, "transparent-port", c.TransparentPort, "gateway port that takes PROXY v2 connections")
	fl.Uint16Var(&c.ProxyPort, "proxy-port", c.ProxyPort, "gateway explicit proxy port")
	fl.Uint16Var(&c.DNSPort, "dns-port", c.DNSPort, "gateway DNS port")
	fl.Uint16Var(&c.ForwarderPort, "forward-port", c.ForwarderPort, "local forwarder port")
	fl.StringVar(&f.NestedPool, "nested-pool", "", "nested mode: the inner Docker engine's IPv4 address pool (e.g. "+netfence.DefaultNestedPool.String()+")")
	fl.StringVar(&c.Uplink, "uplink", netfence.DefaultUplink, "nested mode: the interface toward the sandbox network")
	fl.BoolVar(&f.Check, "check", false, "only verify that the fence is in place")
	fl.BoolVar(&f.Pod, "pod", false, "a Kubernetes session pod's fence: no sysctls, inbound connections dropped, a self-test whose receipt is printed before ready")
	fl.BoolVar(&f.Joined, "joined", false, "with --check: from a container that joined the namespace (no ready file; the uplink and the gateway must answer)")
	fl.DurationVar(&f.VerifyEvery, "verify-interval", netfence.DefaultVerifyInterval, "how often to re-verify the rules (exit if they changed)")
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
		f  netfence.SelfTestFlags
		st = netfence.SelfTest{Config: netfence.DefaultConfig()}
	)
	cmd := &cobra.Command{
		Use:    "selftest --gateway IP --target IP:PORT... --nonce N",
		Short:  "Prove the fence from inside the sandbox namespace",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exitFor(netfence.SelfTestCommand(cmd.Context(), st, f, a.stdio.Out))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Gateway, "gateway", "", "gateway address on the sandbox network")
	fl.StringArrayVar(&f.Targets, "target", nil, "canary address IP:PORT to probe (repeatable)")
	fl.StringVar(&st.Nonce, "nonce", "", "marks this run's payloads")
	fl.StringVar(&st.DeniedName, "denied-name", "", "a name no rule allows")
	fl.StringVar(&f.Sinkhole, "sinkhole", "", "the expected block answer for it (empty: NXDOMAIN)")
	fl.StringVar(&f.Resolver, "resolver", "127.0.0.11:53", "the namespace's DNS server")
	fl.StringVar(&f.NestedPool, "nested-pool", "", "the running netclient's nested pool (its rules are verified in nested mode)")
	fl.StringVar(&st.Uplink, "uplink", netfence.DefaultUplink, "nested mode: the interface toward the sandbox network")
	fl.DurationVar(&st.Timeout, "timeout", 2*time.Second, "bound of each probe")
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
