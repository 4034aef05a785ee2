package seatbelt

import (
	"errors"
	"fmt"
	"time"

	"vak/internal/sandbox"
)

// SandboxExec is the only sandbox-exec vak runs: an absolute path, so a PATH
// entry planted by someone else can never replace it.
const SandboxExec = "/usr/bin/sandbox-exec"

// ErrUnsupported reports that this platform has no Seatbelt. It also matches
// errors.ErrUnsupported.
var ErrUnsupported = fmt.Errorf("seatbelt is only available on macOS: %w", errors.ErrUnsupported)

// ErrUnavailable reports that sandbox-exec is missing or cannot apply a
// profile here (for example because the caller is itself sandboxed).
var ErrUnavailable = errors.New("seatbelt sandbox unavailable")

// ErrNoCommand reports an empty argv given to Command.
var ErrNoCommand = errors.New("seatbelt: no command to run")

// PrivateHome is the directory, inside the session temp dir, that Command
// exports as HOME.
const PrivateHome = "home"

// ProbeTimeout bounds the availability probe (one sandbox-exec of
// /usr/bin/true).
const ProbeTimeout = 10 * time.Second

// New returns a Seatbelt backend.
func New() *Backend { return &Backend{} }

var _ sandbox.Backend = (*Backend)(nil)

// Name implements sandbox.Backend.
func (*Backend) Name() string { return string(sandbox.Seatbelt) }

// Scope implements sandbox.Backend: Seatbelt confines the worker process.
func (*Backend) Scope() sandbox.Scope { return sandbox.ScopeProcess }
