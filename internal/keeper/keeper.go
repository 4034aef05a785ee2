// Package keeper keeps a large workspace's watch alive between cold `vak
// run`s.
//
// A cold `vak run` is one process per command. Before the command it needs
// every .git entry of the workspace (the sandbox's mount plan and the
// sweep's baseline), and after it what changed (the sweep). A process that
// lives for one command cannot keep an inotify watch for the next, so it
// checks the workspace's fsguard.Ledger instead: one stat per directory,
// twice per run. On a tree of 100,000 files in 11,000 directories those
// stats cost more than the rest of the run.
//
// A keeper is a process of the user's that holds an fsguard change watch
// (fsguard.NewChangeWatch) on one workspace and answers a run's scans from
// it: what Tree.Scan would say now, at the cost of what changed since its
// last answer. A run that finds its workspace large (MinDirs directories)
// and no keeper starts one for the next runs (Start: `vak __keep-watch`,
// detached); the keeper builds its watch, then listens on a socket in
// vak's state directory, which no sandbox can see or write, and leaves
// after Idle without a question, when its socket is removed or replaced,
// when the workspace directory is another one, or when its watch gives
// up. It answers only processes of its own user; a run talks only to a
// keeper of its own user in its own mount and user namespaces (not a
// process in a sandbox). A run that gets no answer, or a bad one, scans
// with the Ledger as before: a keeper only ever saves time.
package keeper

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
	"time"

	"vak/internal/fsguard"
	"vak/internal/paths"
)

// Command is the hidden vak command a keeper runs as: `vak __keep-watch
// WORKSPACE` (Run).
const Command = "__keep-watch"

// MinDirs is how many directories a workspace has before a run starts a
// keeper for it. Below it a Ledger's pass costs a few milliseconds, less
// than a process and its watches would be worth.
const MinDirs = 1000

// Idle is how long a keeper waits for a question before it leaves.
const Idle = 15 * time.Minute

// protocol names the request and answer format; a keeper of another
// version is another socket.
const protocol = "vak-keeper 1"

// Errors of a scan through a keeper. Every one means: scan without it.
var (
	// ErrNoKeeper: nothing listens on the workspace's socket.
	ErrNoKeeper = errors.New("no keeper")
	// ErrUntrusted: the process on the socket is not a keeper this
	// process may believe (another user, another mount or user
	// namespace).
	ErrUntrusted = errors.New("untrusted keeper")
)

// SocketOf is Socket in vak's state directory (paths.StateDir), "" when
// there is none.
func SocketOf(ws string) string {
	d, err := paths.StateDir()
	if err != nil {
		return ""
	}
	return Socket(d, ws)
}

// Socket is where the keeper of canonical workspace ws listens, in vak's
// state directory stateDir: named by a hash of the path and the protocol.
// It is "" when the path would be too long for a unix socket.
func Socket(stateDir, ws string) string {
	sum := sha256.Sum256([]byte(protocol + "\x00" + ws))
	p := filepath.Join(stateDir, "keepers", hex.EncodeToString(sum[:12])+".sock")
	if len(p) > 100 {
		return ""
	}
	return p
}

// Result is what a scan through a keeper found, and who answered.
type Result struct {
	Scan fsguard.Scan
	PID  int
}
