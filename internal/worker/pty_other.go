//go:build !linux

package worker

import (
	"errors"
	"fmt"
	"os"

	"vak/internal/worker/wire"
)

// openPTY is Linux-only for now: the macOS worker answers tty requests
// with code unsupported.
func openPTY() (master, slave *os.File, err error) {
	return nil, nil, fmt.Errorf("a terminal inside the sandbox is implemented on Linux only: %w", errors.ErrUnsupported)
}

func setWinsize(*os.File, wire.TTYSize) error { return errors.ErrUnsupported }

func endOfInput(*os.File, byte, bool) []byte { return []byte{4} }

func setRawInput(*os.File) error { return errors.ErrUnsupported }

func winchForeground(*os.File) error { return errors.ErrUnsupported }
