//go:build !linux

package main

import (
	"errors"
	"fmt"
	"syscall"
)

// notifyFloorSupported: no seccomp here, so no floor with vak's session
// tracking (startNotifyFloor).
const notifyFloorSupported = false

// notifySetsid is Linux's (seccomp).
func notifySetsid() (keep any, err error) {
	return nil, fmt.Errorf("a seccomp listener for setsid: %w", errors.ErrUnsupported)
}

// intoCgroup is Linux's (cgroup v2).
func intoCgroup(*syscall.SysProcAttr, int) {}

// floorCgroup: no cgroup v2 here.
func floorCgroup() (string, func(), bool) { return "", nil, false }
