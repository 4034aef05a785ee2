//go:build !linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// RunContainer is Linux-only.
func RunContainer(ctx context.Context, spec *Spec, desc string, in io.Reader, out io.Writer) error {
	return ErrContainerUnsupported
}

// LstatIdentity is the MountIdentity of path as it is now, from one lstat
// (a final symlink is not followed). Attrs are Linux-only (the runtime that
// needs them, gVisor, is).
func LstatIdentity(path string, attrs bool) (MountIdentity, error) {
	if attrs {
		return MountIdentity{}, fmt.Errorf("%w: %w", ErrContainerUnsupported, errors.ErrUnsupported)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return MountIdentity{}, err
	}
	return MountIdentity{Path: path, Dev: uint64(st.Dev), Ino: uint64(st.Ino), Type: uint32(st.Mode) & syscall.S_IFMT}, nil
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
