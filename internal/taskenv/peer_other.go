//go:build !linux

package taskenv

import (
	"context"
	"fmt"
	"net"
)

// dialWorker needs Linux: the worker's socket is reached through a bind
// mount and verified with SO_PEERCRED against the container's processes,
// which on other hosts live in the Docker VM. Sessions there are driven
// over the attached stdio of the process that created them.
func dialWorker(ctx context.Context, runDir, containerID string) (net.Conn, error) {
	return nil, fmt.Errorf("%w: reaching a session's worker socket needs a Linux host running the Docker daemon", ErrUnsupported)
}
