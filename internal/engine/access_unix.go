//go:build unix

package engine

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// socketFix says how user may get to use the socket at path: join the
// group that owns it when the group may connect, else that only its owner
// may ("" when it cannot be told).
func socketFix(path, who string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	perm := fi.Mode().Perm()
	if perm&0o020 == 0 {
		return fmt.Sprintf("only its owner (uid %d) may connect to it (mode %#o)", st.Uid, perm)
	}
	gid := strconv.FormatUint(uint64(st.Gid), 10)
	g, err := user.LookupGroupId(gid)
	if err != nil {
		return fmt.Sprintf("add %s to the socket's group (gid %s), then log in again", who, gid)
	}
	return fmt.Sprintf("add %s to the %s group (usermod -aG %s %s, then log in again)", who, g.Name, g.Name, who)
}
