// Package procfs reads the process table from /proc: each process's parent,
// session and state. The worker uses it to kill a command's whole tree and
// the Landlock supervisor to check who is asking for setsid.
package procfs

import "errors"

// ErrUnsupported is returned where there is no Linux /proc.
var ErrUnsupported = errors.New("procfs: /proc is only available on Linux")

// Proc is one process, from /proc/PID/stat.
type Proc struct {
	PID, PPID, SID int
	State          byte // R, S, D, Z (zombie), X (dead), ...
}

// Live reports whether the process still runs (is not a zombie or dead).
func (p Proc) Live() bool { return p.State != 'Z' && p.State != 'X' }
