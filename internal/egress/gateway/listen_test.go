package gateway

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestListenDNSPortTaken: DNS on port 0 gets UDP and TCP on one port even
// when TCP is taken on many ports the kernel may pick for UDP (with a
// thousand of them held, about one pick in thirty collides); a fixed
// port whose TCP side is taken is an error naming it.
func TestListenDNSPortTaken(t *testing.T) {
	var held []net.Listener
	t.Cleanup(func() {
		for _, l := range held {
			l.Close()
		}
	})
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for range 300 {
		udp, tcp, err := listenDNS("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if u, p := udp.LocalAddr().(*net.UDPAddr).Port, tcp.Addr().(*net.TCPAddr).Port; u != p {
			t.Fatalf("UDP on %d, TCP on %d", u, p)
		}
		udp.Close()
		tcp.Close()
	}
	// A fixed port: no retry, the error says what is in use.
	_, _, err := listenDNS(held[0].Addr().String())
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("fixed port with TCP taken: %v, want EADDRINUSE", err)
	}
}
