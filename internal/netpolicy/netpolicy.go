// Package netpolicy is the one vocabulary of `[network] policy` and the
// --network flag: the type, its two values and the one parser. config,
// the egress gateway's configuration (egressconfig), the sandbox seam and
// task environments all use it; it depends on nothing, so the gateway,
// which knows no sandbox, can use it too.
package netpolicy

import (
	"errors"
	"fmt"
)

// Policy says what network sandboxed commands have in a restricted mode
// (full access has the host's).
type Policy string

// The network policies.
const (
	// None: no network at all (the default).
	None Policy = "none"
	// Proxied: a network whose only way out is vak's egress gateway, by
	// the [network] rules of the trusted config.
	Proxied Policy = "proxied"
)

// ErrUnknown reports a network policy name that is not one of the two.
var ErrUnknown = errors.New("unknown network policy")

// Parse parses a policy name; "" means None. Any other name is an error
// wrapping ErrUnknown (fail closed: never a weaker policy).
func Parse(s string) (Policy, error) {
	switch p := Policy(s); p {
	case "":
		return None, nil
	case None, Proxied:
		return p, nil
	}
	return "", fmt.Errorf("%w %q (want %s or %s)", ErrUnknown, s, None, Proxied)
}
