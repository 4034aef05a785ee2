//go:build linux

package peercred

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Get returns the peer's credentials (SO_PEERCRED: those it had when it
// connected). c must be a *net.UnixConn.
func Get(c net.Conn) (Cred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Cred{}, fmt.Errorf("peer credentials: not a unix connection")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return Cred{}, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return Cred{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}, nil
}
