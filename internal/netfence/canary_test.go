package netfence

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The canary records what reaches it over TCP and UDP, so a self-test can
// tell a direct arrival from a relayed one; another run's nonce does not
// count.
func TestCanaryRecordsArrivals(t *testing.T) {
	file := filepath.Join(t.TempDir(), "canary.log")
	c, err := ListenCanary("127.0.0.1:0", file)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.Addr().String()
	tc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tc.Write([]byte(CanaryPrefix + "tcpnonce\n"))
	tc.Close()
	uc, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	uc.Write([]byte(CanaryPrefix + "udpnonce\x00\x1b[31m\n"))
	uc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(file)
		if len(CanaryHits(data, "tcpnonce")) == 1 && len(CanaryHits(data, "udpnonce")) == 1 {
			if len(CanaryHits(data, "othernonce")) != 0 || len(CanaryHits(data, "")) != 0 {
				t.Fatalf("hits for a nonce that was never sent: %q", data)
			}
			for _, b := range data {
				if b < ' ' && b != '\n' {
					t.Fatalf("control bytes recorded: %q", data)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("canary file: %q", data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
