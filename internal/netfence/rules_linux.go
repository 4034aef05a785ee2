package netfence

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// ruleset is the expected state: tables, chains and rule expressions.
type ruleset struct {
	nat, filter *nftables.Table
	chains      []chainSpec
	// noSysctl: program leaves route_localnet alone (the pod fence).
	noSysctl bool
}

// chainSpec is one chain and its rules, in order.
type chainSpec struct {
	chain *nftables.Chain
	rules [][]expr.Any
}

// natPriority runs vak's NAT before Docker's (-100).
const natPriority = -150

func ifname(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}

func be16(p uint16) []byte { return binaryutil.BigEndian.PutUint16(p) }

// l4 matches the layer-4 protocol proto.
func l4(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// dport matches the TCP/UDP destination port p.
func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(p)},
	}
}

// cat joins expression lists into one rule.
func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func build(c Config) *ruleset {
	gw := c.Gateway.AsSlice()
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	oifLo := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")},
	}
	// "ip daddr GW": in the ip-family table the header is known to be IPv4;
	// in the inet table the rule first checks the family (as nft does).
	ipDaddrGW := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: gw},
	}
	daddrGW := append([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}, ipDaddrGW...)
	dnat := []expr.Any{
		&expr.Immediate{Register: 1, Data: gw},
		&expr.Immediate{Register: 2, Data: be16(c.DNSPort)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true},
	}
	r := &ruleset{
		nat:    &nftables.Table{Family: nftables.TableFamilyIPv4, Name: NATTable},
		filter: &nftables.Table{Family: nftables.TableFamilyINet, Name: FilterTable},
	}
	drop := nftables.ChainPolicyDrop
	// Before Docker's own NAT (priority -100): its embedded DNS server at
	// 127.0.0.11 forwards queries from the host's namespace, outside the
	// fence, so DNS must be bound to the gateway before Docker's DNAT runs
	// (the first NAT decision of a connection is the one that holds).
	natOut := &nftables.Chain{Name: "output", Table: r.nat, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(natPriority)}
	natPost := &nftables.Chain{Name: "postrouting", Table: r.nat, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}
	// DNS sent to a loopback resolver (Docker's 127.0.0.11) leaves with a
	// loopback source once redirected to the gateway; give it this
	// namespace's address so the gateway can answer (needs route_localnet).
	natPostRules := [][]expr.Any{{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{0xff, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}},
		&expr.Masq{},
	}}
	filterOut := &nftables.Chain{Name: "output", Table: r.filter, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop}
	natRules := [][]expr.Any{
		// DNS, to whatever server (127.0.0.11 included), goes to the
		// gateway's resolver.
		cat(l4(unix.IPPROTO_UDP), dport(53), dnat),
		cat(l4(unix.IPPROTO_TCP), dport(53), dnat),
		// Loopback stays loopback (the forwarder itself listens there).
		cat(oifLo, []expr.Any{accept}),
		// The forwarder's own connections and explicit-proxy use reach the
		// gateway as they are.
		cat(ipDaddrGW, []expr.Any{accept}),
	}
	if c.Nested() {
		// Nested mode: connections to inner containers (their addresses,
		// published ports DNAT'd by docker-proxy) stay local.
		natRules = append(natRules, cat(ipDaddrIn(c.NestedPool), []expr.Any{accept}))
	}
	natRules = append(natRules,
		// Every other TCP connection: to the local forwarder (the flag makes
		// the kernel use the port in the register, not the original one).
		cat(l4(unix.IPPROTO_TCP), []expr.Any{
			&expr.Immediate{Register: 1, Data: be16(c.ForwarderPort)},
			&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
		}),
	)
	// "ip daddr 127.0.0.1": local services and the redirected connections.
	// Only 127.0.0.1: other loopback addresses host things that are not
	// ours (Docker's embedded DNS listens on 127.0.0.11 and forwards from
	// outside the fence). The destination is matched, not the device: the
	// filter hook sees the device chosen before the nat hook redirected.
	toLocalhost := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 1}},
	}
	// Replies of accepted connections (the forwarder's answers to a
	// redirected client travel to the client's own address).
	established := []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
	filterRules := [][]expr.Any{
		cat(established, []expr.Any{accept}),
		cat(toLocalhost, []expr.Any{accept}),
	}
	if c.Nested() {
		filterRules = append(filterRules, cat(isIPv4, ipDaddrIn(c.NestedPool), []expr.Any{accept}))
	}
	filterRules = append(filterRules,
		cat(daddrGW, l4(unix.IPPROTO_TCP), dport(c.TransparentPort), []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_TCP), dport(c.ProxyPort), []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_TCP), dport(c.DNSPort), []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_UDP), dport(c.DNSPort), []expr.Any{accept}),
		// Everything else, IPv6 included, hits the chain's drop policy.
	)
	r.chains = []chainSpec{{natOut, natRules}, {natPost, natPostRules}, {filterOut, filterRules}}
	if c.Pod {
		// Nothing may open a connection toward the pod: only loopback and
		// the replies to its own connections come in.
		in := &nftables.Chain{Name: "input", Table: r.filter, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop}
		iifLo := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")},
		}
		r.chains = append(r.chains, chainSpec{in, [][]expr.Any{
			cat(iifLo, []expr.Any{accept}),
			cat(established, []expr.Any{accept}),
		}})
		r.noSysctl = true
	}
	if !c.Nested() {
		return r
	}

	// Nested mode: a Docker engine in this namespace routes its bridges'
	// traffic through prerouting and forward, which the output chains
	// never see. Capture it the same way, before Docker's own DNAT (-100).
	up := func(op expr.CmpOp, key expr.MetaKey) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: key, Register: 1},
			&expr.Cmp{Op: op, Register: 1, Data: ifname(c.uplink())},
		}
	}
	ret := []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}
	toForwarder := []expr.Any{
		&expr.Immediate{Register: 1, Data: []byte{127, 0, 0, 1}},
		&expr.Immediate{Register: 2, Data: be16(c.ForwarderPort)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true},
	}
	natPre := &nftables.Chain{Name: "prerouting", Table: r.nat, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(natPriority)}
	natPreRules := [][]expr.Any{
		// Inbound from the sandbox network: not an inner container's egress.
		cat(up(expr.CmpOpEq, expr.MetaKeyIIFNAME), ret),
		// To an address of this namespace (published ports, hairpin):
		// Docker's DNAT handles it.
		cat([]expr.Any{
			&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		}, ret),
		// Routed to an inner bridge (the same or another): stays inside.
		cat([]expr.Any{
			&expr.Fib{Register: 1, FlagDADDR: true, ResultOIFNAME: true},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(c.uplink())},
		}, ret),
		// The explicit proxy, as for the agent.
		cat(ipDaddrGW, l4(unix.IPPROTO_TCP), dport(c.ProxyPort), ret),
		// DNS, whatever resolver the container picked: the gateway's.
		cat(l4(unix.IPPROTO_UDP), dport(53), dnat),
		cat(l4(unix.IPPROTO_TCP), dport(53), dnat),
		// Every other TCP connection: the forwarder on 127.0.0.1 (DNAT, not
		// REDIRECT, which would pick the bridge address; route_localnet=1).
		cat(l4(unix.IPPROTO_TCP), toForwarder),
	}
	fwd := &nftables.Chain{Name: "forward", Table: r.filter, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop}
	fwdRules := [][]expr.Any{
		// Inner <-> inner and sandbox network -> inner.
		cat(up(expr.CmpOpNeq, expr.MetaKeyOIFNAME), []expr.Any{accept}),
		cat(established, []expr.Any{accept}),
		// Out of the namespace: only DNS and the explicit proxy, to the
		// gateway (TCP was DNAT'd to the forwarder and is not forwarded).
		cat(daddrGW, l4(unix.IPPROTO_TCP), dport(c.ProxyPort), []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_TCP), dport(c.DNSPort), []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_UDP), dport(c.DNSPort), []expr.Any{accept}),
		// Everything else (UDP, ICMP, IPv6, raw IP) hits the drop policy.
	}
	// route_localnet is 1 here (the forwarder needs it): a packet arriving
	// from outside (an inner bridge, the sandbox network) must never reach
	// a loopback address directly.
	raw := &nftables.Chain{Name: "prerouting", Table: r.filter, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw}
	rawRules := [][]expr.Any{cat(
		[]expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")},
		},
		isIPv4, ipDaddrIn(netip.MustParsePrefix("127.0.0.0/8")),
		[]expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}},
	)}
	r.chains = append(r.chains, chainSpec{natPre, natPreRules}, chainSpec{fwd, fwdRules}, chainSpec{raw, rawRules})
	return r
}

// isIPv4 checks the family in the inet table (as nft does for "ip ...").
var isIPv4 = []expr.Any{
	&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
	&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
}

// ipDaddrIn matches "ip daddr PREFIX".
func ipDaddrIn(p netip.Prefix) []expr.Any {
	mask := net.CIDRMask(p.Bits(), 32)
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte(mask), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
	}
}

// Apply replaces vak's tables in the current network namespace with the
// fence for c, then verifies them.
func Apply(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := program(build(c)); err != nil {
		return err
	}
	return Verify(c)
}

// program sets route_localnet (the redirected connections and DNS reach
// 127.0.0.1) and replaces vak's tables with r.
func program(r *ruleset) error {
	for _, f := range []string{"/proc/sys/net/ipv4/conf/all/route_localnet", "/proc/sys/net/ipv4/conf/default/route_localnet"} {
		if r.noSysctl {
			break
		}
		if err := ensureSysctl(f, "1"); err != nil {
			return err
		}
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfence: netlink: %w", err)
	}
	// Remove any previous version of our tables (ignore "not found").
	for _, t := range []*nftables.Table{r.nat, r.filter} {
		conn.DelTable(t)
		conn.Flush()
	}
	conn.AddTable(r.nat)
	conn.AddTable(r.filter)
	for _, cs := range r.chains {
		conn.AddChain(cs.chain)
		for _, e := range cs.rules {
			conn.AddRule(&nftables.Rule{Table: cs.chain.Table, Chain: cs.chain, Exprs: e})
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netfence: program nftables: %w", err)
	}
	return nil
}

// Verify reads the namespace's ruleset back and checks that vak's chains
// and rules are exactly as built, with the filter chain's policy drop.
func Verify(c Config) error {
	r := build(c)
	if err := verify(r, !c.Nested()); err != nil {
		return err
	}
	if !c.Pod {
		return nil
	}
	// The pod fence also refuses chains of other tables on its hooks
	// that run before it (one could accept what it drops).
	_, err := digestAndCheck(r)
	return err
}

// verify checks r's chains; with noNested, the chains only nested mode
// has must be absent.
func verify(r *ruleset, noNested bool) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfence: netlink: %w", err)
	}
	check := func(t *nftables.Table, want *nftables.Chain, rules [][]expr.Any) error {
		ch, err := conn.ListChain(t, want.Name)
		if err != nil {
			return fmt.Errorf("%w: chain %s %s: %v", ErrNotVerified, t.Name, want.Name, err)
		}
		if ch.Hooknum == nil || *ch.Hooknum != *want.Hooknum || ch.Type != want.Type {
			return fmt.Errorf("%w: chain %s %s has the wrong hook or type", ErrNotVerified, t.Name, want.Name)
		}
		if want.Policy != nil && (ch.Policy == nil || *ch.Policy != *want.Policy) {
			return fmt.Errorf("%w: chain %s %s policy is not drop", ErrNotVerified, t.Name, want.Name)
		}
		got, err := conn.GetRules(t, ch)
		if err != nil {
			return fmt.Errorf("%w: rules of %s %s: %v", ErrNotVerified, t.Name, want.Name, err)
		}
		if len(got) != len(rules) {
			return fmt.Errorf("%w: %s %s has %d rules, want %d", ErrNotVerified, t.Name, want.Name, len(got), len(rules))
		}
		for i := range rules {
			if !reflect.DeepEqual(normalize(got[i].Exprs), normalize(rules[i])) {
				return fmt.Errorf("%w: %s %s rule %d differs: %s", ErrNotVerified, t.Name, want.Name, i, describe(got[i].Exprs))
			}
		}
		return nil
	}
	for _, cs := range r.chains {
		if err := check(cs.chain.Table, cs.chain, cs.rules); err != nil {
			return err
		}
	}
	if noNested {
		// A nested-mode chain left over (or added by someone else) would
		// change what this namespace lets through.
		for _, extra := range []struct {
			t    *nftables.Table
			name string
		}{{r.nat, "prerouting"}, {r.filter, "forward"}, {r.filter, "prerouting"}} {
			if _, err := conn.ListChain(extra.t, extra.name); err == nil {
				return fmt.Errorf("%w: unexpected chain %s %s (nested mode is off)", ErrNotVerified, extra.t.Name, extra.name)
			}
		}
	}
	return nil
}

// normalize renders expressions comparably (the kernel echoes some fields
// that were left zero when the rule was built).
func normalize(es []expr.Any) []string {
	out := make([]string, len(es))
	for i, e := range es {
		switch v := e.(type) {
		case *expr.NAT:
			out[i] = fmt.Sprintf("nat %d %d %d-%d %d-%d %v", v.Type, v.Family, v.RegAddrMin, v.RegAddrMax, v.RegProtoMin, v.RegProtoMax, v.Specified)
		case *expr.Redir:
			out[i] = fmt.Sprintf("redir %d-%d %#x", v.RegisterProtoMin, v.RegisterProtoMax, v.Flags)
		case *expr.Verdict:
			out[i] = fmt.Sprintf("verdict %d", v.Kind)
		case *expr.Meta:
			out[i] = fmt.Sprintf("meta %d %d", v.Key, v.Register)
		case *expr.Cmp:
			out[i] = fmt.Sprintf("cmp %d %d %x", v.Op, v.Register, v.Data)
		case *expr.Payload:
			out[i] = fmt.Sprintf("payload %d %d %d %d", v.Base, v.Offset, v.Len, v.DestRegister)
		case *expr.Bitwise:
			out[i] = fmt.Sprintf("bitwise %d %d %d %x %x", v.SourceRegister, v.DestRegister, v.Len, v.Mask, v.Xor)
		case *expr.Masq:
			out[i] = "masq"
		case *expr.Fib:
			out[i] = fmt.Sprintf("fib %d %+v", v.Register, *v)
		case *expr.Ct:
			out[i] = fmt.Sprintf("ct %d %d", v.Key, v.Register)
		case *expr.Immediate:
			out[i] = fmt.Sprintf("imm %d %x", v.Register, v.Data)
		default:
			out[i] = fmt.Sprintf("%T %+v", e, e)
		}
	}
	return out
}

func describe(es []expr.Any) string { return fmt.Sprint(normalize(es)) }

// DisableIPv6 turns IPv6 off in the current network namespace (a second
// layer under the drop policy). In a container /proc/sys is read-only; the
// container must then be created with the sysctl already set, which this
// checks.
func DisableIPv6() error {
	for _, f := range []string{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"} {
		if err := ensureSysctl(f, "1"); err != nil {
			return err
		}
	}
	return nil
}

// ensureSysctl makes a sysctl file hold want: fine if it already does,
// written if it can be, an error naming the key otherwise. A missing file
// (IPv6 not compiled in) is fine.
func ensureSysctl(path, want string) error {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err == nil && strings.TrimSpace(string(data)) == want {
		return nil
	}
	if werr := os.WriteFile(path, []byte(want), 0o644); werr != nil {
		return fmt.Errorf("netfence: %s must be %s: %w", path, want, werr)
	}
	return nil
}
