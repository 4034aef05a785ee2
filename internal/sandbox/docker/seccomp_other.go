//go:build !linux

package docker

import (
	"fmt"

	"vak/internal/engine"
)

// SeccompProfile needs the moby module's default profile, which is built
// for Linux hosts only.
func SeccompProfile() ([]byte, error) {
	return nil, fmt.Errorf("docker: vak's seccomp profile: %w on this host OS", engine.ErrUnsupported)
}
