package netfence

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// buildLocal is the ruleset of LocalConfig.
func buildLocal(c LocalConfig) *ruleset {
	c = c.WithDefaults()
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	localhost := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 1}},
	}
	toRelay := []expr.Any{
		&expr.Immediate{Register: 1, Data: []byte{127, 0, 0, 1}},
		&expr.Immediate{Register: 2, Data: be16(c.DNSPort)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true},
	}
	r := &ruleset{
		nat:    &nftables.Table{Family: nftables.TableFamilyIPv4, Name: NATTable},
		filter: &nftables.Table{Family: nftables.TableFamilyINet, Name: FilterTable},
	}
	drop := nftables.ChainPolicyDrop
	natOut := &nftables.Chain{Name: "output", Table: r.nat, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(natPriority)}
	natRules := [][]expr.Any{
		// DNS, to whatever server: the relay, which asks the gateway.
		cat(l4(unix.IPPROTO_UDP), dport(53), toRelay),
		cat(l4(unix.IPPROTO_TCP), dport(53), toRelay),
		// The namespace's own loopback stays as it is.
		cat(localhost, accept),
		// Every other TCP connection: the forwarder.
		cat(l4(unix.IPPROTO_TCP), []expr.Any{
			&expr.Immediate{Register: 1, Data: be16(c.ForwarderPort)},
			&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
		}),
	}
	filterOut := &nftables.Chain{Name: "output", Table: r.filter, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop}
	established := []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: nativeU32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  nativeU32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: nativeU32(0)},
	}
	filterRules := [][]expr.Any{
		cat(established, accept),
		// 127.0.0.1 after NAT: the namespace's own services and what the
		// rules above redirected. Everything else (UDP, ICMP, IPv6, raw IP)
		// hits the drop policy.
		cat(isIPv4, localhost, accept),
	}
	r.chains = []chainSpec{{natOut, natRules}, {filterOut, filterRules}}
	return r
}

func nativeU32(v uint32) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, v)
	return b
}

// ApplyLocal brings the namespace's loopback up with a default route
// through it (so that connections to any address reach the output hook
// instead of failing with "network unreachable"), turns IPv6 off, programs
// the rules of c and verifies them. It needs CAP_NET_ADMIN over the
// namespace.
func ApplyLocal(c LocalConfig) error {
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("netfence: loopback up: %w", err)
	}
	if err := DisableIPv6(); err != nil {
		return err
	}
	if err := defaultRouteLo(); err != nil {
		return fmt.Errorf("netfence: default route through lo: %w", err)
	}
	if err := program(buildLocal(c)); err != nil {
		return err
	}
	return VerifyLocal(c)
}

// VerifyLocal checks the rules of c as Verify does.
func VerifyLocal(c LocalConfig) error { return verify(buildLocal(c), true) }

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// defaultRouteLo adds "default dev lo src 127.0.0.1" (rtnetlink).
func defaultRouteLo() error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	attr := func(typ uint16, data []byte) []byte {
		l := unix.SizeofRtAttr + len(data)
		b := make([]byte, (l+3)&^3)
		binary.NativeEndian.PutUint16(b[0:], uint16(l))
		binary.NativeEndian.PutUint16(b[2:], typ)
		copy(b[unix.SizeofRtAttr:], data)
		return b
	}
	body := []byte{unix.AF_INET, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_LINK, unix.RTN_UNICAST, 0, 0, 0, 0}
	body = append(body, attr(unix.RTA_OIF, nativeU32(uint32(lo.Index)))...)
	body = append(body, attr(unix.RTA_PREFSRC, []byte{127, 0, 0, 1})...)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], unix.RTM_NEWROUTE)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	msg = append(msg, body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	// The answer is one nlmsghdr of type NLMSG_ERROR whose payload starts
	// with the (negated) errno, 0 for success.
	for b := buf[:n]; len(b) >= unix.SizeofNlMsghdr+4; {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		typ := binary.NativeEndian.Uint16(b[4:])
		if l < unix.SizeofNlMsghdr || l > len(b) {
			break
		}
		if typ == unix.NLMSG_ERROR {
			if e := int32(binary.NativeEndian.Uint32(b[unix.SizeofNlMsghdr:])); e != 0 {
				return unix.Errno(-e)
			}
			return nil
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return fmt.Errorf("no netlink acknowledgement")
}

// Local is a running native fence: the forwarder and the DNS relay.
type Local struct {
	fwd   *Forwarder
	relay *DNSRelay
	lns   []interface{ Close() error }
}

// ServeLocal applies the fence of c in the current network namespace and
// serves its forwarder and DNS relay, which reach the gateway only through
// dialData (PROXY v2 streams to its transparent listener) and dialDNS (DNS
// over TCP framing to its resolver). Close stops them.
func ServeLocal(c LocalConfig, dialData, dialDNS func(ctx context.Context) (net.Conn, error), errLog *log.Logger) (*Local, error) {
	c = c.WithDefaults()
	if err := ApplyLocal(c); err != nil {
		return nil, err
	}
	l := &Local{}
	fl, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", c.ForwarderPort))
	if err != nil {
		return nil, fmt.Errorf("netfence: forwarder: %w", err)
	}
	l.lns = append(l.lns, fl)
	dnsAddr := fmt.Sprintf("127.0.0.1:%d", c.DNSPort)
	du, err := net.ListenPacket("udp4", dnsAddr)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("netfence: DNS relay: %w", err)
	}
	l.lns = append(l.lns, du)
	dt, err := net.Listen("tcp4", dnsAddr)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("netfence: DNS relay: %w", err)
	}
	l.lns = append(l.lns, dt)
	l.fwd = &Forwarder{
		// Only named in errors: Dial ignores it.
		Gateway:  netip.AddrPortFrom(netip.IPv4Unspecified(), 0),
		Dial:     func(ctx context.Context, _, _ string) (net.Conn, error) { return dialData(ctx) },
		ErrorLog: errLog,
		Loopback: true,
	}
	l.relay = &DNSRelay{Dial: dialDNS}
	go l.fwd.Serve(fl)
	go l.relay.ServeUDP(du)
	go l.relay.ServeTCP(dt)
	return l, nil
}

// Close stops the forwarder and the relay and ends their connections.
func (l *Local) Close() {
	for _, c := range l.lns {
		c.Close()
	}
	if l.fwd != nil {
		l.fwd.Close()
	}
	if l.relay != nil {
		l.relay.Close()
	}
}
