//go:build !linux

package origdst

import (
	"net"
	"net/netip"
)

// Lookup always fails with ErrUnsupported off Linux.
func Lookup(c net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, ErrUnsupported
}
