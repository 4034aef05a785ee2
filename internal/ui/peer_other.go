//go:build !linux

package ui

import (
	"errors"
	"fmt"
	"net"
)

// peerUID is not implemented here: every peer is refused.
func peerUID(net.Conn) (int, error) {
	return -1, fmt.Errorf("ui: the owner of a loopback connection: %w", errors.ErrUnsupported)
}

// errPeerCheck: without peerUID the page would serve every local user.
var errPeerCheck = fmt.Errorf("ui: vak ui needs to tell which user a loopback connection is from, which is built for Linux only: %w", errors.ErrUnsupported)
