//go:build unix

package agentnet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// tryLock takes an exclusive advisory lock (flock) on path without
// waiting. It returns the unlock function, or ok=false when another open
// file (another process, or another starter in this one) holds it. The
// kernel drops the lock when its holder dies, so a crashed broker or
// starter leaves nothing stale behind.
func tryLock(path string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("agentnet: lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("agentnet: lock %s: %w", path, err)
	}
	return func() { f.Close() }, true, nil
}

// detach makes cmd a session (and process group) leader of its own, so
// that signals sent to the starter's terminal or process group do not
// reach the broker it starts.
func detach(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return nil
}
