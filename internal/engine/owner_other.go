//go:build !linux

package engine

import (
	"errors"
	"fmt"
)

// OwnerToken needs /proc: sessions on other hosts have no owning process
// and end by idle timeout, lifetime or `vak session rm`.
func OwnerToken(pid int) (string, error) {
	return "", fmt.Errorf("%w: %w: session owner processes need Linux", ErrUnsupported, errors.ErrUnsupported)
}

// OwnerAlive never judges a token here.
func OwnerAlive(token string) (alive, known bool) { return false, false }
