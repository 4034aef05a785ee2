package sandbox

import "vak/internal/netpolicy"

// NetworkPolicy says what network sandboxed commands have in a restricted
// mode (FullAccess has the host's): netpolicy's type, parsed once (config
// for [network] policy, netpolicy.Parse for the --network flag, which
// overrides it like --mode).
type NetworkPolicy = netpolicy.Policy

// The network policies.
const (
	// NetworkNone: no network at all (the default).
	NetworkNone = netpolicy.None
	// NetworkProxied: a network whose only way out is vak's egress
	// gateway, by the [network] rules of the trusted config: the
	// workspace's Docker topology for command-scoped backends and task
	// environments, a fenced namespace toward the user's on-demand gateway
	// for the landlock backend (see ProxiedNetwork).
	NetworkProxied = netpolicy.Proxied
)
