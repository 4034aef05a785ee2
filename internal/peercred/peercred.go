// Package peercred reads the credentials of the process at the other end of
// a unix socket connection: the one check every vak socket (the gateway's
// admin socket, a session worker's socket, vak mcp --listen, the agentnet
// broker) makes before it serves a peer.
package peercred

// Cred is what the kernel recorded of the peer when it connected.
type Cred struct {
	PID int
	UID int
	GID int
}
