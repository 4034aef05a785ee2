//go:build unix

package logins

import (
	"os"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on path (created 0600) and returns
// its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
