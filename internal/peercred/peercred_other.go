//go:build !linux

package peercred

import (
	"errors"
	"fmt"
	"net"
)

// Get is not implemented here: callers refuse the connection (or rely on
// the socket's mode, and say so).
func Get(net.Conn) (Cred, error) {
	return Cred{}, fmt.Errorf("peer credentials of a unix socket: %w", errors.ErrUnsupported)
}
