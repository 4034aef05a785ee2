//go:build unix

package agenthome

import (
	"fmt"
	"os"
	"syscall"
)

// checkOwner refuses a directory that is not the invoking user's.
func checkOwner(d string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s belongs to uid %d, not to the invoking user (uid %d)", ErrInvalid, d, st.Uid, os.Getuid())
	}
	return nil
}
