// Package peercred reads the credentials of the process at the other end of
// a unix socket connection: the one check every vak socket (the gateway's
// admin socket, a session worker's socket, vak mcp --listen, the agentnet
// broker) makes before it serves a peer.
package peercred

import "net"

// Cred is what the kernel recorded of the peer when it connected.
type Cred struct {
	PID int
	UID int
	GID int
}

// UID is the uid of the process at the other end of c (see Get); -1 with
// the error (wrapping errors.ErrUnsupported off Linux) when unknown, which
// refuses the peer.
func UID(c net.Conn) (int, error) {
	cred, err := Get(c)
	if err != nil {
		return -1, err
	}
	return cred.UID, nil
}
