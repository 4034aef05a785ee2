//go:build !linux

package admin

import (
	"net"
	"syscall"
)

// checkPeer cannot read peer credentials portably here; the socket's 0600
// mode in a 0700 directory is the access control.
func checkPeer(c net.Conn) error { return nil }

func umask(m int) int { return syscall.Umask(m) }

// peerName names the other end of c for receipts (unknown here).
func peerName(net.Conn) string { return "admin socket" }
