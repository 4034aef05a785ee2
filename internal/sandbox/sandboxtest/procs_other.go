//go:build !linux

package sandboxtest

import (
	"errors"
	"fmt"
)

// liveWith needs Linux's /proc.
func liveWith(string) ([]int, error) {
	return nil, fmt.Errorf("listing processes: %w", errors.ErrUnsupported)
}
