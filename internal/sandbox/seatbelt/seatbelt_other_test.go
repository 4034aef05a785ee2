//go:build !darwin

package seatbelt

import (
	"context"
	"errors"
	"testing"

	"vak/internal/sandbox"
)

// TestUnsupported checks that the backend fails loudly off macOS, never
// running anything unsandboxed.
func TestUnsupported(t *testing.T) {
	b := New()
	if b.Name() != "seatbelt" || b.Scope() != sandbox.ScopeProcess {
		t.Fatalf("Name, Scope = %q, %v", b.Name(), b.Scope())
	}
	if err := b.Available(context.Background()); !errors.Is(err, ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Available = %v, want ErrUnsupported", err)
	}
	cmd, err := Command(context.Background(), basePolicy(sandbox.WorkspaceWrite), []string{"/bin/true"})
	if cmd != nil || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Command = %v, %v, want nil, ErrUnsupported", cmd, err)
	}
}
