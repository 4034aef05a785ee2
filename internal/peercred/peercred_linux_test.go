//go:build linux

package peercred

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestGet(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		done <- c
	}()
	cc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc := <-done
	if sc == nil {
		t.Fatal("accept failed")
	}
	defer sc.Close()
	got, err := Get(sc)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Cred{PID: os.Getpid(), UID: os.Getuid(), GID: os.Getgid()}); got != want {
		t.Fatalf("Get = %+v, want %+v", got, want)
	}
	// Not a unix connection: an error, never a zero (root) uid.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if c, err := Get(a); err == nil {
		t.Fatalf("Get(pipe) = %+v, want an error", c)
	}
}
