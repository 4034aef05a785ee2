package netfence

import (
	"fmt"
	"net"
	"net/netip"
	"time"
)

// CheckJoined is the health check of a container that joined a netclient's
// namespace (a dev container's dockerd; `vak netclient --check --joined`),
// after Verify: it fails unless the uplink is up with an IPv4 address and
// the gateway's DNS port accepts a TCP connection within timeout. A
// namespace whose netclient container is gone keeps its rules (the joiner
// holds it open) but loses the uplink, so this is what tells a live
// namespace from a dead one.
func CheckJoined(c Config, timeout time.Duration) error {
	up := c.uplink()
	ifi, err := net.InterfaceByName(up)
	if err != nil {
		return fmt.Errorf("netfence: the uplink %s is gone (the netclient this namespace belonged to was removed or restarted): %w", up, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return fmt.Errorf("netfence: addresses of %s: %w", up, err)
	}
	hasV4 := false
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			hasV4 = true
		}
	}
	if ifi.Flags&net.FlagUp == 0 || !hasV4 {
		return fmt.Errorf("netfence: the uplink %s is down or has no IPv4 address", up)
	}
	conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(c.Gateway, c.DNSPort).String(), timeout)
	if err != nil {
		return fmt.Errorf("netfence: the gateway does not answer from this namespace: %w", err)
	}
	return conn.Close()
}
