//go:build unix

package wsync

import (
	"syscall"
	"testing"
)

func mkfifo(t *testing.T, path string) {
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}
