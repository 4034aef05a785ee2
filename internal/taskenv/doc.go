// Package taskenv is vak's session-scoped task environments
// (docs/sessions.md): one long-lived container per (task, workspace),
// created for the first turn of an agent's session, reused by later turns
// and destroyed (or snapshotted into an immutable image) when the session is
// released. It is driven through the Engine API, never the docker CLI, and
// its commands run through vak's own worker, which is the container's
// entrypoint:
//
//	Create ──> container "vak-session-TASK-HASH"
//	             PID 1: /.vak/bin/vak __worker --container   (vak, bind-mounted read-only)
//	             ├─ protocol on the attached stdio            (the broker that created it)
//	             └─ protocol on /.vak/run/worker.sock          (= STATE/sessions/run/SLOT on the host)
//	Exec   ──> one protocol request; the worker forks `sh -c` under the reap shim
//	           (a terminal, -t, or root, --root: docker exec instead, RunCommand
//	           and RelayDockerExec, the only docker CLI this package runs)
//	Snapshot─> docker commit, tagged vak-env:KEY (KEY = hash of base, manifest, policy)
//	Discard──> docker rm -f, run directory and record removed
//
// The broker decides everything about the container: its name (from task
// and workspace), its mounts (the canonical workspace at its own path, the
// worker binary and the per-session socket directory; never a Docker socket,
// host credentials, vak's config or state, or another workspace), the image
// (a tag is resolved to the image ID at create time and the session is
// pinned to that ID), limits, network policy and lifetime.
//
// The per-command docker run wrap (the docker sandbox backend) is package
// sandbox/docker; this package shares its image, user and label conventions.
package taskenv
