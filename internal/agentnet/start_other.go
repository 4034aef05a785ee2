//go:build !unix

package agentnet

import (
	"errors"
	"fmt"
	"os/exec"
)

// tryLock needs flock, which this platform lacks.
func tryLock(path string) (func(), bool, error) {
	return nil, false, fmt.Errorf("agentnet: lock %s: %w", path, errors.ErrUnsupported)
}

// detach needs sessions, which this platform lacks.
func detach(*exec.Cmd) error {
	return fmt.Errorf("agentnet: start the broker: %w", errors.ErrUnsupported)
}
