//go:build !linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// RunContainer is Linux-only.
func RunContainer(ctx context.Context, spec *Spec, desc string, in io.Reader, out io.Writer) error {
	return ErrContainerUnsupported
}

// LstatAttrs is Linux-only (the runtimes that need it, gVisor's, are).
func LstatAttrs(path string) (FileAttrs, error) {
	return FileAttrs{}, fmt.Errorf("%w: %w", ErrContainerUnsupported, errors.ErrUnsupported)
}

// Reap is Linux-only.
func Reap(args []string) int {
	fmt.Fprintf(os.Stderr, "vak: %s: %v\n", ReapCommand, ErrContainerUnsupported)
	return 126
}

// warmShims exist only on Linux (container mode).
type warmShims struct{}

func (w *warmShims) run(argv []string, dir string, env []string, stdin *string, stdout, stderr io.Writer) (process, error) {
	return nil, ErrContainerUnsupported
}

// waitShimReady: there are no reap shims off Linux.
func waitShimReady(pid int) error { return nil }
