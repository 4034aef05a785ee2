//go:build !darwin

package seatbelt

import (
	"context"
	"os/exec"
)

// Available implements sandbox.Backend: Seatbelt exists only on macOS, so it
// always returns ErrUnsupported here.
func (*Backend) Available(context.Context) error { return ErrUnsupported }

// Command returns ErrUnsupported: Seatbelt exists only on macOS. (On macOS
// it returns the command that runs argv under sandbox-exec.)
func Command(context.Context, Policy, []string) (*exec.Cmd, error) { return nil, ErrUnsupported }

// Backend is the Seatbelt backend; on this platform it is never available.
type Backend struct{}
