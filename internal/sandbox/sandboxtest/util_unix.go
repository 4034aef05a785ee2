//go:build unix

package sandboxtest

import (
	"os"
	"syscall"
	"testing"
)

func ownerUID(fi os.FileInfo) int {
	if fi == nil {
		return -1
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

func listenUnix(t *testing.T, path string) *Listener { return listenCounting(t, "unix", path) }

func inodeOf(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }
