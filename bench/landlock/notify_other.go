//go:build !linux

package main

import (
	"errors"
	"fmt"
)

// notifyFloorSupported: no seccomp here, so no floor with vak's session
// tracking (startNotifyFloor).
const notifyFloorSupported = false

// notifySetsid is Linux's (seccomp).
func notifySetsid(int) error {
	return fmt.Errorf("a seccomp listener for setsid: %w", errors.ErrUnsupported)
}
