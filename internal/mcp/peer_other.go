//go:build !linux

package mcp

import (
	"errors"
	"fmt"
	"net"
)

// peerUID is not implemented here: a unix socket listener is refused.
func peerUID(net.Conn) (int, error) {
	return -1, fmt.Errorf("peer credentials of a unix socket: %w", errors.ErrUnsupported)
}
