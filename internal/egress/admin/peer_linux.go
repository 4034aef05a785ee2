//go:build linux

package admin

import (
	"fmt"
	"net"
	"os"
	"syscall"

	"vak/internal/peercred"
)

// checkPeer refuses unix peers whose uid differs from ours (root may always
// connect).
func checkPeer(c net.Conn) error {
	cred, err := peercred.Get(c)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if cred.UID != os.Getuid() && cred.UID != 0 {
		return fmt.Errorf("admin: peer uid %d is not %d", cred.UID, os.Getuid())
	}
	return nil
}

func umask(m int) int { return syscall.Umask(m) }

// peerName names the process at the other end of c for receipts.
func peerName(c net.Conn) string {
	cred, err := peercred.Get(c)
	if err != nil {
		return "admin socket"
	}
	return fmt.Sprintf("admin socket, uid %d, pid %d", cred.UID, cred.PID)
}
