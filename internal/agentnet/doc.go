// Package agentnet is the core of the brokered workspace network
// (docs/agent-network.md): a pure library that lets the agents of two workspaces exchange
// bounded, typed messages across an edge that both workspaces' trusted
// policies approve.
//
// The Broker holds a persistent identity per workspace (bound to the
// canonical workspace path and the owning uid, stored in the state dir,
// never in a workspace), the policies (from the trusted user config only;
// see Policy), the live task registrations and their short-lived,
// audience-bound, HMAC-signed task tokens, and one bounded queue per
// directed edge. An edge is up only while both workspaces' policies are
// enabled and name each other, and both hold a live registration.
//
// Every registration, edge change, send, delivery, refusal and revocation
// is appended to a hash-chained receipts log (internal/receipts). Records
// carry workspace identities, task ids, topics and sizes, never a token or
// a message body.
//
// Revocation (Revoke, Unregister, or a policy reload that drops an edge)
// acts at once: receives waiting on a closed edge fail with ErrRevoked and
// messages queued on it are dropped and receipted.
//
// Around the core: Run serves a Broker on a 0600 unix socket (Listen holds
// the one-broker-per-state-dir lock); Ensure starts that daemon on demand,
// detached, for the first client that needs it; Client speaks to it over
// reused connections; Task is one running task's registration, kept by the
// trusted process that serves it (renewal, re-registration with a
// restarted broker; the token never leaves it); Tool serves the
// agent_network tool for a Task next to a worker's tools.
package agentnet
