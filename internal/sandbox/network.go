package sandbox

import (
	"errors"
	"fmt"
)

// NetworkPolicy says what network sandboxed commands have in a restricted
// mode (FullAccess has the host's). It is parsed once, by config, and the
// --network flag overrides it like --mode.
type NetworkPolicy string

// The network policies.
const (
	// NetworkNone: no network at all (the default).
	NetworkNone NetworkPolicy = "none"
	// NetworkProxied: a network whose only way out is vak's egress
	// gateway, by the [network] rules of the trusted config: the
	// workspace's Docker topology for command-scoped backends and task
	// environments, a fenced namespace toward the user's on-demand gateway
	// for the landlock backend (see ProxiedNetwork).
	NetworkProxied NetworkPolicy = "proxied"
)

// ErrUnknownNetwork reports a network policy name that is not one of the two.
var ErrUnknownNetwork = errors.New("unknown network policy")

// ParseNetworkPolicy parses a policy name; "" means NetworkNone.
func ParseNetworkPolicy(s string) (NetworkPolicy, error) {
	switch p := NetworkPolicy(s); p {
	case "":
		return NetworkNone, nil
	case NetworkNone, NetworkProxied:
		return p, nil
	}
	return "", fmt.Errorf("%w %q (want %s or %s)", ErrUnknownNetwork, s, NetworkNone, NetworkProxied)
}
