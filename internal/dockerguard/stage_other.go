//go:build !linux

package dockerguard

import (
	"errors"
	"fmt"
)

// stageBind needs Linux (openat2, bind mounts): the guard runs in a Linux
// sidecar.
func (g *Guard) stageBind(_, src string, _ bool, field string) error {
	return fmt.Errorf("dockerguard: staging %s source %q: %w", field, src, errors.ErrUnsupported)
}

func prepareStage(dir string) error {
	return fmt.Errorf("dockerguard: stage dir %s: %w", dir, errors.ErrUnsupported)
}

// unstage has nothing to undo where nothing can be staged.
func unstage(string) {}
