//go:build !linux

package leanstage

import (
	"errors"
	"fmt"
)

// sealedExecutable needs Linux's memfd; the lean program is a Linux
// program in any case (its stages are the landlock backend's).
func sealedExecutable(string) (string, error) {
	return "", fmt.Errorf("leanstage: %w", errors.ErrUnsupported)
}
