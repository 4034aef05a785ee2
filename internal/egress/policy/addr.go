package policy

import "net/netip"

// MetadataAddr is the cloud instance metadata address (AWS, GCP, Azure,
// OpenStack). It is link-local and therefore never public; it is named here
// because tests and docs refer to it.
var MetadataAddr = netip.MustParseAddr("169.254.169.254")

// nonPublic lists address ranges that are not globally reachable unicast
// destinations: private, loopback, link-local (including cloud metadata),
// CGNAT, documentation, benchmarking, multicast, reserved, and the IPv6 forms
// that embed an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo). A name that
// resolves into one of these is refused unless a rule lists a CIDR for it.
var nonPublic = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",          // "this network"
		"10.0.0.0/8",         // private
		"100.64.0.0/10",      // CGNAT (RFC 6598)
		"127.0.0.0/8",        // loopback
		"169.254.0.0/16",     // link-local, cloud metadata
		"172.16.0.0/12",      // private
		"192.0.0.0/24",       // IETF protocol assignments
		"192.0.2.0/24",       // TEST-NET-1
		"192.88.99.0/24",     // 6to4 relay anycast
		"192.168.0.0/16",     // private
		"198.18.0.0/15",      // benchmarking
		"198.51.100.0/24",    // TEST-NET-2
		"203.0.113.0/24",     // TEST-NET-3
		"224.0.0.0/4",        // multicast
		"240.0.0.0/4",        // reserved, broadcast
		"::/127",             // unspecified, loopback
		"::ffff:0:0/96",      // IPv4-mapped
		"64:ff9b::/96",       // NAT64 (embeds IPv4)
		"64:ff9b:1::/48",     // local-use NAT64
		"100::/64",           // discard
		"2001::/23",          // IETF protocol assignments (incl. Teredo)
		"2001:db8::/32",      // documentation
		"2002::/16",          // 6to4 (embeds IPv4)
		"fc00::/7",           // unique local (incl. fd00:ec2::254 metadata)
		"fe80::/10",          // link-local
		"fec0::/10",          // deprecated site-local
		"ff00::/8",           // multicast
		"::/96",              // deprecated IPv4-compatible
		"3fff::/20",          // documentation (RFC 9637)
		"5f00::/16",          // SRv6 SIDs
		"2620:4f:8000::/48",  // AS112 direct delegation
		"192.31.196.0/24",    // AS112
		"192.52.193.0/24",    // AMT
		"192.175.48.0/24",    // AS112 direct delegation
		"255.255.255.255/32", // limited broadcast (inside 240/4, named for clarity)
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// IsPublic reports whether a is a globally reachable unicast address. Zoned
// and invalid addresses are never public.
func IsPublic(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}
