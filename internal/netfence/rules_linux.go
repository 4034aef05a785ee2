package netfence

import (
	"fmt"
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
	nat, filter       *nftables.Table
	natOut, filterOut *nftables.Chain
	natPost           *nftables.Chain
	natRules          [][]expr.Any
	natPostRules      [][]expr.Any
	filterRules       [][]expr.Any
}

// natPriority runs vak's NAT before Docker's (-100).
const natPriority = -150

func ifname(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}

func be16(p uint16) []byte { return binaryutil.BigEndian.PutUint16(p) }

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
	l4 := func(proto byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		}
	}
	dport := func(p uint16) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(p)},
		}
	}
	cat := func(parts ...[]expr.Any) []expr.Any {
		var out []expr.Any
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
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
	r.natOut = &nftables.Chain{Name: "output", Table: r.nat, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(natPriority)}
	r.natPost = &nftables.Chain{Name: "postrouting", Table: r.nat, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}
	// DNS sent to a loopback resolver (Docker's 127.0.0.11) leaves with a
	// loopback source once redirected to the gateway; give it this
	// namespace's address so the gateway can answer (needs route_localnet).
	r.natPostRules = [][]expr.Any{{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{0xff, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}},
		&expr.Masq{},
	}}
	r.filterOut = &nftables.Chain{Name: "output", Table: r.filter, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop}
	r.natRules = [][]expr.Any{
		// DNS, to whatever server (127.0.0.11 included), goes to the
		// gateway's resolver.
		cat(l4(unix.IPPROTO_UDP), dport(53), dnat),
		cat(l4(unix.IPPROTO_TCP), dport(53), dnat),
		// Loopback stays loopback (the forwarder itself listens there).
		cat(oifLo, []expr.Any{accept}),
		// The forwarder's own connections and explicit-proxy use reach the
		// gateway as they are.
		cat(ipDaddrGW, []expr.Any{accept}),
		// Every other TCP connection: to the local forwarder (the flag makes
		// the kernel use the port in the register, not the original one).
		cat(l4(unix.IPPROTO_TCP), []expr.Any{
			&expr.Immediate{Register: 1, Data: be16(c.ForwarderPort)},
			&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
		}),
	}
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
	r.filterRules = [][]expr.Any{
		cat(established, []expr.Any{accept}),
		cat(toLocalhost, []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_TCP), dport(c.TransparentPort), []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_TCP), dport(c.ProxyPort), []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_TCP), dport(c.DNSPort), []expr.Any{accept}),
		cat(daddrGW, l4(unix.IPPROTO_UDP), dport(c.DNSPort), []expr.Any{accept}),
		// Everything else, IPv6 included, hits the chain's drop policy.
	}
	return r
}

// Apply replaces vak's tables in the current network namespace with the
// fence for c, then verifies them.
func Apply(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	for _, f := range []string{"/proc/sys/net/ipv4/conf/all/route_localnet", "/proc/sys/net/ipv4/conf/default/route_localnet"} {
		if err := ensureSysctl(f, "1"); err != nil {
			return err
		}
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfence: netlink: %w", err)
	}
	r := build(c)
	// Remove any previous version of our tables (ignore "not found").
	for _, t := range []*nftables.Table{r.nat, r.filter} {
		conn.DelTable(t)
		conn.Flush()
	}
	conn.AddTable(r.nat)
	conn.AddTable(r.filter)
	conn.AddChain(r.natOut)
	conn.AddChain(r.natPost)
	conn.AddChain(r.filterOut)
	for _, e := range r.natRules {
		conn.AddRule(&nftables.Rule{Table: r.nat, Chain: r.natOut, Exprs: e})
	}
	for _, e := range r.natPostRules {
		conn.AddRule(&nftables.Rule{Table: r.nat, Chain: r.natPost, Exprs: e})
	}
	for _, e := range r.filterRules {
		conn.AddRule(&nftables.Rule{Table: r.filter, Chain: r.filterOut, Exprs: e})
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netfence: program nftables: %w", err)
	}
	return Verify(c)
}

// Verify reads the namespace's ruleset back and checks that vak's chains
// and rules are exactly as built, with the filter chain's policy drop.
func Verify(c Config) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfence: netlink: %w", err)
	}
	r := build(c)
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
	if err := check(r.nat, r.natOut, r.natRules); err != nil {
		return err
	}
	if err := check(r.nat, r.natPost, r.natPostRules); err != nil {
		return err
	}
	return check(r.filter, r.filterOut, r.filterRules)
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
