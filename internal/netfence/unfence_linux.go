package netfence

import (
	"fmt"

	"github.com/google/nftables"
)

// Unfence is what an attacker who gained NET_ADMIN in the sandbox namespace
// would do first: flush the whole ruleset. It exists so tests can prove that
// the topology still fails closed; it needs NET_ADMIN in the namespace.
func Unfence() error {
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	conn.FlushRuleset()
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("flush ruleset: %w", err)
	}
	return nil
}
