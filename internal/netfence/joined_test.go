package netfence

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestCheckJoined(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	open := uint16(ln.Addr().(*net.TCPAddr).Port)
	// A port that was free a moment ago and is closed now.
	l2, _ := net.Listen("tcp4", "127.0.0.1:0")
	closed := uint16(l2.Addr().(*net.TCPAddr).Port)
	l2.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		name string
		c    Config
		want string // "" = healthy
	}{
		{"live (control)", Config{Gateway: lo, DNSPort: open, Uplink: "lo"}, ""},
		{"uplink gone", Config{Gateway: lo, DNSPort: open, Uplink: "vakgone0"}, "is gone"},
		{"gateway silent", Config{Gateway: lo, DNSPort: closed, Uplink: "lo"}, "does not answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckJoined(tc.c, 2*time.Second)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckJoined = %v, want %q", err, tc.want)
			}
		})
	}
}
