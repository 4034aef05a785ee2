// Package none is the "no sandbox" backend. Resolution only ever selects it
// for mode full-access, which disables sandboxing by definition; requesting
// it for a restricted mode is an error (see sandbox.ErrNoneRestricted).
package none

import (
	"context"

	"vak/internal/sandbox"
)

// Backend runs commands directly on the host.
type Backend struct{}

// Name implements sandbox.Backend.
func (Backend) Name() string { return string(sandbox.None) }

// Scope implements sandbox.Backend: the (unrestricted) worker process.
func (Backend) Scope() sandbox.Scope { return sandbox.ScopeProcess }

// Available implements sandbox.Backend; running on the host always works.
func (Backend) Available(context.Context) error { return nil }

// WorkerDescription is what an unsandboxed worker reports in its ready event.
const WorkerDescription = "none: full access, nothing is sandboxed"

func init() {
	sandbox.RegisterWorker(string(sandbox.None), sandbox.DescribeWorker(WorkerDescription))
}
