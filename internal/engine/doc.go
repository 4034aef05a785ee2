// Package engine is vak's one owner of the Docker Engine plumbing that the
// Docker backend, task environments (sessions), the proxied topology, the
// nested Docker sidecar, the dev-container template and the command line
// share:
//
//   - the client: New builds the Engine API client from the environment
//     (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, DOCKER_API_VERSION);
//     no other package constructs one (internal/archtest checks it);
//   - the access check: Unreachable, SocketAccess and CheckAccess turn a
//     failed connection into ErrDaemonUnavailable, and a socket this user
//     may not connect to into "permission denied on SOCKET: add USER to the
//     GROUP group", whichever client (the Engine API or the docker CLI)
//     failed;
//   - APIError, the mapping of an Engine API error to those sentinels;
//   - the labels every vak object carries (LabelManaged, LabelKind,
//     LabelWorkspace, LabelOwner, ...) and the owner tokens of LabelOwnerProc
//     (OwnerToken, OwnerAlive);
//   - CheckWorkerBinary, the check that a vak binary can be a container's
//     entrypoint;
//   - Exec, the one way vak runs a command in a running container.
//
// Client is an alias of the Engine API client type, so that a package that
// only passes a client along (internal/cli) does not import the API
// package. The packages that drive the Engine API themselves (taskenv,
// proxynet, dockerd, devcontainer, dockerguard's tests) still use its
// option and result types directly: wrapping every call the Engine API
// offers would be a second copy of that API to keep in step with it, for no
// gain. internal/cli does not import the API package at all.
package engine
