//go:build unix

package docker

import (
	"os"
	"syscall"
	"testing"
)

func owner(t *testing.T, p string) (int, int) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
