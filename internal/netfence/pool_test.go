package netfence

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheckPool(t *testing.T) {
	sandbox := map[string]netip.Prefix{"sandbox": netip.MustParsePrefix("172.30.5.0/24")}
	for _, tc := range []struct {
		pool string
		want string // substring of the error; "" = valid
	}{
		{"10.213.0.0/16", ""},
		{"10.213.7.0/24", ""},
		{"10.213.0.1/16", "host bits"},
		{"10.0.0.0/7", "between"},
		{"10.213.0.0/25", "between"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"224.0.0.0/8", "multicast"},
		{"172.30.0.0/16", "sandbox network 172.30.5.0/24"},
		{"172.30.5.0/24", "sandbox"},
		{"fd00::/64", "IPv4"},
	} {
		err := CheckPool(netip.MustParsePrefix(tc.pool), sandbox)
		if tc.want == "" && err != nil {
			t.Errorf("%s: unexpected error %v", tc.pool, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want an error containing %q", tc.pool, err, tc.want)
		}
	}
}

func TestNestedConfigValidate(t *testing.T) {
	c := Config{Gateway: netip.MustParseAddr("10.213.0.9"), TransparentPort: 1, ProxyPort: 2, DNSPort: 3, ForwarderPort: 4, NestedPool: DefaultNestedPool}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "gateway") {
		t.Fatalf("a pool holding the gateway was accepted: %v", err)
	}
	c.Gateway = netip.MustParseAddr("172.30.5.2")
	if err := c.Validate(); err != nil {
		t.Fatalf("control: %v", err)
	}
	c.Uplink = "an-interface-name-too-long"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "uplink") {
		t.Fatalf("a 26-byte uplink name was accepted: %v", err)
	}
}
