// Package netfence confines a network namespace so that every packet leaves
// only through the vak gateway. It is the netclient of the proxied topology
// (see docs/ARCHITECTURE.md, "Network policies"): sandboxed containers share
// the netclient's namespace, whose nftables rules
//
//   - redirect every TCP connection to a local forwarder, which connects to the
//     gateway's transparent port and prefixes the stream with a PROXY v2
//     header carrying the original destination;
//   - send DNS (UDP and TCP port 53, whatever server the client picked) to the
//     gateway's resolver;
//   - drop everything else: other UDP (QUIC included), ICMP, IPv6, raw IP.
//
// The rules are only half of the fence. The sandbox network is Docker
// --internal with inhibit_ipv4, so a process that gains NET_ADMIN and flushes
// them still reaches nothing but the gateway, which speaks only policy.
//
// LocalConfig is the same fence for a namespace with no interface but its
// loopback (the landlock backend's proxied network): the forwarder and a DNS
// relay run inside the namespace and reach the gateway over unix sockets
// (ServeLocal).
package netfence

import (
	"errors"
	"fmt"
	"net/netip"
)

// Config describes the gateway the namespace may reach.
type Config struct {
	// Gateway is the gateway's address on the sandbox network.
	Gateway netip.Addr
	// TransparentPort receives PROXY-v2-prefixed connections from the forwarder.
	TransparentPort uint16
	// ProxyPort is the explicit proxy (HTTPS_PROXY), reachable directly.
	ProxyPort uint16
	// DNSPort is the gateway's policy-aware resolver (UDP and TCP).
	DNSPort uint16
	// ForwarderPort is the local forwarder's port on 127.0.0.1.
	ForwarderPort uint16
	// NestedPool, when valid, turns on nested mode: a Docker engine runs in
	// this namespace and allocates its bridges from this pinned IPv4 pool.
	// Traffic from those bridges is captured as the namespace's own is (see
	// docs/nested-docker.md). The zero Prefix leaves nested mode off.
	NestedPool netip.Prefix
	// Uplink is the interface toward the sandbox network (nested mode
	// only; empty means DefaultUplink).
	Uplink string
	// Pod is the proxied fence of a Kubernetes session pod (docs/
	// kubernetes.md): the gateway is the in-cluster gateway's Service
	// address; no sysctl is set (a pod's /proc/sys is read-only, and
	// nothing needs route_localnet: the pod's resolver is the gateway, not
	// a loopback address); IPv6 is dropped by the filter table rather than
	// disabled; and an input chain drops every connection opened toward
	// the pod (another pod of the cluster could otherwise give the
	// workload a channel out).
	Pod bool
}

// DefaultUplink is the sandbox-network interface of a Docker container.
const DefaultUplink = "eth0"

// DefaultNestedPool is the inner address pool vak pins for nested Docker.
var DefaultNestedPool = netip.MustParsePrefix("10.213.0.0/16")

// Nested reports whether nested mode is on.
func (c Config) Nested() bool { return c.NestedPool.IsValid() }

func (c Config) uplink() string {
	if c.Uplink == "" {
		return DefaultUplink
	}
	return c.Uplink
}

// Defaults for the ports.
const (
	DefaultTransparentPort = 15001
	DefaultProxyPort       = 3128
	DefaultDNSPort         = 53
	DefaultForwarderPort   = 15000
)

// ErrNotVerified reports rules that are missing or differ from the expected set.
var ErrNotVerified = errors.New("netfence: rules not in place")

// Validate checks the config.
func (c Config) Validate() error {
	if !c.Gateway.Is4() || c.Gateway.IsLoopback() || c.Gateway.IsUnspecified() {
		return fmt.Errorf("netfence: gateway %v must be a non-loopback IPv4 address", c.Gateway)
	}
	for name, p := range map[string]uint16{"transparent": c.TransparentPort, "proxy": c.ProxyPort, "dns": c.DNSPort, "forwarder": c.ForwarderPort} {
		if p == 0 {
			return fmt.Errorf("netfence: %s port is zero", name)
		}
	}
	if c.Pod && c.Nested() {
		return errors.New("netfence: the pod fence has no nested mode")
	}
	if c.Nested() {
		if err := CheckPool(c.NestedPool, map[string]netip.Prefix{"gateway": netip.PrefixFrom(c.Gateway, 32)}); err != nil {
			return err
		}
		if len(c.uplink()) > 15 {
			return fmt.Errorf("netfence: uplink interface name %q is longer than 15 bytes", c.uplink())
		}
	}
	return nil
}

// CheckPool checks a nested address pool: IPv4, written in canonical form
// (no host bits), at most a /8 and at least a /24, outside loopback,
// link-local and multicast space, and overlapping none of the named
// networks (the sandbox and egress subnets, the gateway).
func CheckPool(pool netip.Prefix, others map[string]netip.Prefix) error {
	if !pool.IsValid() || !pool.Addr().Is4() {
		return fmt.Errorf("netfence: nested pool %v must be an IPv4 prefix", pool)
	}
	if pool.Masked() != pool {
		return fmt.Errorf("netfence: nested pool %v has host bits set (want %v)", pool, pool.Masked())
	}
	if pool.Bits() < 8 || pool.Bits() > 24 {
		return fmt.Errorf("netfence: nested pool %v must be between a /8 and a /24", pool)
	}
	for name, reserved := range map[string]netip.Prefix{
		"loopback":   netip.MustParsePrefix("127.0.0.0/8"),
		"link-local": netip.MustParsePrefix("169.254.0.0/16"),
		"multicast":  netip.MustParsePrefix("224.0.0.0/3"),
		"this-net":   netip.MustParsePrefix("0.0.0.0/8"),
	} {
		if pool.Overlaps(reserved) {
			return fmt.Errorf("netfence: nested pool %v overlaps %s space %v", pool, name, reserved)
		}
	}
	for name, o := range others {
		if o.IsValid() && pool.Overlaps(o) {
			return fmt.Errorf("netfence: nested pool %v overlaps the %s network %v", pool, name, o)
		}
	}
	return nil
}

// Table names (prefixed so that vak's rules are recognisable in `nft list`).
const (
	NATTable    = "vak_nat"
	FilterTable = "vak_filter"
)

// Sysctls a netclient container must be created with (Docker sets them in
// its network namespace; /proc/sys is read-only inside).
var Sysctls = map[string]string{
	"net.ipv6.conf.all.disable_ipv6":       "1",
	"net.ipv6.conf.default.disable_ipv6":   "1",
	"net.ipv4.conf.all.route_localnet":     "1",
	"net.ipv4.conf.default.route_localnet": "1",
}
