//go:build unix

package sandboxtest

import (
	"net"
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

func listenUnix(t *testing.T, path string) *Listener {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{Listener: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.Accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return l
}
