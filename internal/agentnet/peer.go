package agentnet

import (
	"net"

	"vak/internal/peercred"
)

// peerUID is the uid of the process at the other end of a unix connection;
// an error (wrapping errors.ErrUnsupported off Linux) refuses the peer.
func peerUID(c net.Conn) (int, error) {
	cred, err := peercred.Get(c)
	if err != nil {
		return -1, err
	}
	return cred.UID, nil
}
