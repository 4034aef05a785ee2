package gateway

import (
	"fmt"
	"os"
	"strings"
)

// IPForwardFile says whether this network namespace forwards IPv4.
const IPForwardFile = "/proc/sys/net/ipv4/ip_forward"

// checkNoForwarding fails unless IPv4 forwarding is off in file's network
// namespace (Options.RequireNoForwarding).
func checkNoForwarding(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("cannot verify that IP forwarding is off: %w", err)
	}
	if v := strings.TrimSpace(string(data)); v != "0" {
		return fmt.Errorf("%s is %s: the gateway must not forward packets between its networks (create its container with sysctl net.ipv4.ip_forward=0)", file, v)
	}
	return nil
}
