// Package worker is the worker side of vak's broker<->worker protocol: the
// server that answers the requests of package wire, the host-side shell and
// file tools (under fsguard's checks), and a session container's PID 1.
//
// The broker (trusted: it holds config and policy) never executes model
// input itself. It starts a worker — the same binary re-executed as
// `vak __worker`, restricted by the sandbox backend before it serves anything —
// and speaks JSON lines to it over the worker's stdin and stdout. The wire
// types and the client live in package wire, which depends on nothing else
// in vak; the full protocol is documented in docs/worker-protocol.md.
package worker
