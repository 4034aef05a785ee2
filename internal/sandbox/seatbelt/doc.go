// Package seatbelt is vak's macOS process-scoped sandbox backend: it writes a
// Seatbelt profile (SBPL, the Scheme dialect of Apple's sandbox) for a Policy
// and runs the worker under /usr/bin/sandbox-exec with it, so the worker and
// every process it starts are confined for their whole life.
//
// Profile is plain Go with no platform code: it is built and tested on every
// platform (golden files in testdata/, a fuzz target proving that no path can
// escape its string literal, and a model of Seatbelt's rule matching that
// checks the security properties). The Backend and Command are real only on
// macOS; elsewhere they return ErrUnsupported, never a silent no-op.
//
// The profile denies by default and then allows, in this order (Seatbelt
// applies the last matching rule, so each step may narrow the ones before):
//
//  1. process, sysctl, Mach, IPC and device basics a toolchain needs;
//  2. reads of system paths (never the data volume's alias of them);
//  3. grants from trusted config that contain the home directory;
//  4. the home directory closed for reading and writing;
//  5. the workspace (writable in WorkspaceWrite), the session temp dir and
//     the remaining grants, plus metadata of their ancestors for traversal;
//     no hard links anywhere;
//  6. unix-domain sockets only in the temp dir; IP networking (loopback
//     included) denied unless AllowNetwork, or, with Proxy, only TCP to the
//     local gateway's port on loopback;
//  7. protected workspace paths closed for writing, whatever their case;
//  8. Deny paths closed for everything;
//  9. the persistent home (AgentHome) opened, although it lies in a Deny path.
//
// docs/seatbelt.md explains each rule and what was verified where.
package seatbelt
