package worker

import (
	"bytes"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelayRefusesNonPID1 is the relay's check against a socket a
// session's command replaced: a listener served by any process but the
// container's PID 1 (here the test itself) is refused before a byte is
// relayed. The positive control (the worker as PID 1 of a pod) is the
// kubernetes backend's end-to-end test.
func TestRelayRefusesNonPID1(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "worker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		var b bytes.Buffer
		b.ReadFrom(c)
		got <- b.Bytes()
	}()
	var out bytes.Buffer
	err = Relay(sock, strings.NewReader(`{"op":"bash"}`+"\n"), &out)
	if !errors.Is(err, ErrRelayPeer) {
		t.Fatalf("Relay to a socket served by PID %d: %v, want ErrRelayPeer", 0, err)
	}
	if b := <-got; len(b) != 0 {
		t.Fatalf("the impostor received %q", b)
	}
	// Control: a missing socket is a plain dial error, not ErrRelayPeer.
	if err := Relay(filepath.Join(t.TempDir(), "none.sock"), strings.NewReader(""), &out); err == nil || errors.Is(err, ErrRelayPeer) {
		t.Fatalf("Relay to no socket: %v", err)
	}
}
