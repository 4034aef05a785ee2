//go:build !linux

package dockerd

import (
	"errors"
	"fmt"
)

// SeccompProfile needs Docker's default profile, which its module builds
// only for Linux.
func SeccompProfile() ([]byte, error) {
	return nil, fmt.Errorf("dockerd: seccomp profile: %w", errors.ErrUnsupported)
}
