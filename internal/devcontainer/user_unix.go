//go:build unix

package devcontainer

import (
	"fmt"
	"os"
	"syscall"
)

// WorkspaceUser is Template.User for the workspace ws: its owner's
// "UID:GID", or "" when root owns it (the image's user then).
func WorkspaceUser(ws string) (string, error) {
	fi, err := os.Stat(ws)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return "", nil
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid), nil
}
