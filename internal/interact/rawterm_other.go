//go:build !linux && !darwin

package interact

import (
	"errors"
	"fmt"
)

// rawTerminal is only implemented on Linux and macOS.
func rawTerminal(int) ([]byte, func(), error) {
	return nil, nil, fmt.Errorf("terminal: raw mode: %w", errors.ErrUnsupported)
}

// OwnTerminals: worker.Exec's pseudo-terminals are Linux-only.
const OwnTerminals = false
