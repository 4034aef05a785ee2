//go:build !linux

package agentnet

import (
	"errors"
	"fmt"
	"net"
)

// peerUID is not implemented here: every connection is refused.
func peerUID(net.Conn) (int, error) {
	return -1, fmt.Errorf("peer credentials of a unix socket: %w", errors.ErrUnsupported)
}
