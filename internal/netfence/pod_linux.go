package netfence

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"vak/internal/netpolicy"
)

// buildPod is the ruleset of c: inet table PodTable, input and output
// accept loopback only, forward nothing; every chain's policy is drop.
func buildPod(c PodConfig) (*ruleset, error) {
	if !slices.Contains(PodModes, c.Mode) {
		return nil, fmt.Errorf("netfence: pod fence mode %q: want one of %s", c.Mode, strings.Join(PodModes, ", "))
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: PodTable}
	drop := nftables.ChainPolicyDrop
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	lo := func(key expr.MetaKey) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: key, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname("lo")},
		}
	}
	chain := func(name string, hook *nftables.ChainHook) *nftables.Chain {
		return &nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: nftables.ChainPriorityFilter, Policy: &drop}
	}
	return &ruleset{filter: t, chains: []chainSpec{
		{chain("input", nftables.ChainHookInput), [][]expr.Any{cat(lo(expr.MetaKeyIIFNAME), accept)}},
		{chain("output", nftables.ChainHookOutput), [][]expr.Any{cat(lo(expr.MetaKeyOIFNAME), accept)}},
		{chain("forward", nftables.ChainHookForward), nil},
	}}, nil
}

// ApplyPod installs the pod fence of c in the current network namespace
// (replacing an earlier PodTable) and verifies it. It needs CAP_NET_ADMIN.
func ApplyPod(c PodConfig) error {
	r, err := buildPod(c)
	if err != nil {
		return err
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netfence: netlink: %w", err)
	}
	conn.DelTable(r.filter)
	conn.Flush() // "not found" on a fresh namespace
	conn.AddTable(r.filter)
	for _, cs := range r.chains {
		conn.AddChain(cs.chain)
		for _, e := range cs.rules {
			conn.AddRule(&nftables.Rule{Table: r.filter, Chain: cs.chain, Exprs: e})
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netfence: program the pod fence: %w", err)
	}
	_, err = VerifyPod(c)
	return err
}

// VerifyPod reads the namespace's ruleset back and checks that PodTable is
// exactly the fence of c, and that no other table has a chain on a hook
// that could accept what the fence drops first (a base chain of another
// table with a priority before the fence's). It returns the digest of the
// rules read back.
func VerifyPod(c PodConfig) (string, error) {
	r, err := buildPod(c)
	if err != nil {
		return "", err
	}
	if err := verify(r, false); err != nil {
		return "", err
	}
	return digestAndCheck(r)
}

// digestAndCheck returns the sha256 of r's chains as read back from the
// kernel, and fails if r's tables hold a chain r does not have.
func digestAndCheck(r *ruleset) (string, error) {
	conn, err := nftables.New()
	if err != nil {
		return "", fmt.Errorf("netfence: netlink: %w", err)
	}
	h := sha256.New()
	for _, cs := range r.chains {
		got, err := conn.GetRules(cs.chain.Table, cs.chain)
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrNotVerified, err)
		}
		fmt.Fprintf(h, "chain %s %s\n", cs.chain.Table.Name, cs.chain.Name)
		for _, rule := range got {
			fmt.Fprintln(h, describe(rule.Exprs))
		}
	}
	chains, err := conn.ListChains()
	if err != nil {
		return "", fmt.Errorf("%w: list chains: %v", ErrNotVerified, err)
	}
	for _, ch := range chains {
		for _, t := range []*nftables.Table{r.nat, r.filter} {
			if t == nil || ch.Table.Name != t.Name || ch.Table.Family != t.Family {
				continue
			}
			if !slices.ContainsFunc(r.chains, func(cs chainSpec) bool { return cs.chain.Table == t && cs.chain.Name == ch.Name }) {
				return "", fmt.Errorf("%w: unexpected chain %s in %s", ErrNotVerified, ch.Name, t.Name)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// SelfTestPod probes the fence from inside the namespace: a TCP listener
// on loopback must be reachable (the control); toward the default
// gateway, the cluster's usual service and metadata addresses, a public
// address and IPv6, a UDP datagram must be refused at once (a drop in the
// output chain fails the send: this tells a fenced namespace from one that
// merely has no route) and a TCP connection must not be made. The probes
// run at once; the self-test takes about a second.
func SelfTestPod(ctx context.Context) []PodCheck {
	hosts := []string{"169.254.169.254", "10.96.0.1", "1.1.1.1", "2606:4700:4700::1111", "fd00::1"}
	if gw, ok := defaultGateway(); ok {
		hosts = append([]string{gw.String()}, hosts...)
	}
	probes := []func() PodCheck{loopbackCheck, icmpCheck}
	for _, h := range hosts {
		probes = append(probes,
			func() PodCheck { return udpCheck("udp "+net.JoinHostPort(h, "53"), net.JoinHostPort(h, "53")) },
			func() PodCheck {
				return blockedCheck(ctx, "tcp "+net.JoinHostPort(h, "443"), "tcp", net.JoinHostPort(h, "443"))
			})
	}
	checks := make([]PodCheck, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() { checks[i] = p() })
	}
	wg.Wait()
	return checks
}

func loopbackCheck() PodCheck {
	c := PodCheck{Name: "tcp loopback (control)", Want: "open"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.Got = "listen: " + err.Error()
		return c
	}
	defer ln.Close()
	go func() {
		if a, err := ln.Accept(); err == nil {
			a.Close()
		}
	}()
	conn, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
	if err != nil {
		c.Got = err.Error()
		return c
	}
	conn.Close()
	c.Got, c.OK = "connected", true
	return c
}

// blockedCheck dials addr and wants it to fail.
func blockedCheck(ctx context.Context, name, network, addr string) PodCheck {
	c := PodCheck{Name: name, Want: "blocked"}
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, network, addr)
	if err == nil {
		conn.Close()
		c.Got = "connected"
		return c
	}
	c.Got, c.OK = shortErr(err), true
	return c
}

// udpCheck sends a datagram to addr and wants the send to fail (a drop in
// the output chain fails sendto at once).
func udpCheck(name, addr string) PodCheck {
	c := PodCheck{Name: name, Want: "blocked"}
	conn, err := net.Dial("udp", addr)
	if err != nil {
		c.Got, c.OK = shortErr(err), true
		return c
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("vak-fence-selftest")); err != nil {
		c.Got, c.OK = shortErr(err), true
		return c
	}
	c.Got = "sent"
	return c
}

// icmpCheck sends an echo request to 1.1.1.1 over an ICMP datagram socket
// (or fails to open one: neither NET_RAW nor the ping group range).
func icmpCheck() PodCheck {
	c := PodCheck{Name: "icmp 1.1.1.1", Want: "blocked"}
	pc, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		c.Got, c.OK = "no ICMP socket: "+shortErr(err), true
		return c
	}
	defer pc.Close()
	echo := []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0}
	if _, err := pc.WriteTo(echo, &net.IPAddr{IP: net.IPv4(1, 1, 1, 1)}); err != nil {
		c.Got, c.OK = shortErr(err), true
		return c
	}
	c.Got = "sent"
	return c
}

func shortErr(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// defaultGateway reads the IPv4 default route's gateway from
// /proc/net/route.
func defaultGateway() (netip.Addr, bool) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return netip.Addr{}, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 3 || fs[1] != "00000000" {
			continue
		}
		v, err := strconv.ParseUint(fs[2], 16, 32)
		if err != nil || v == 0 {
			continue
		}
		// Little-endian in the file.
		return netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}), true
	}
	return netip.Addr{}, false
}

// FencePod applies and verifies the fence of c, runs the self-test and
// returns the receipt; any failure is an error (the receipt says which
// check failed).
func FencePod(ctx context.Context, c PodConfig) (*PodReceipt, error) {
	rc := &PodReceipt{Mode: c.Mode, Table: PodTable, Time: time.Now().UTC()}
	if err := ApplyPod(c); err != nil {
		return rc, err
	}
	digest, err := VerifyPod(c)
	if err != nil {
		return rc, err
	}
	rc.Rules = digest
	rc.Checks = SelfTestPod(ctx)
	return rc, failedChecks(rc)
}

// ProxiedPodSelfTest is the self-test of the proxied pod fence (Config.Pod),
// run by the netclient once its rules are in place and its forwarder
// serves: loopback open (the control), the gateway's DNS port open, ICMP,
// UDP to anywhere but DNS, and IPv6 refused at once, and a plain HTTP
// request to the metadata address, which the rules send through the
// forwarder, answered 403 by the gateway (so the path the workload's
// connections take ends at the policy). The receipt says what each probe
// got; any failure is an error.
func ProxiedPodSelfTest(ctx context.Context, c Config) (*PodReceipt, error) {
	rc := &PodReceipt{Mode: string(netpolicy.Proxied), Table: FilterTable, Time: time.Now().UTC()}
	digest, err := digestAndCheck(build(c))
	if err != nil {
		return rc, err
	}
	rc.Rules = digest
	gw := netip.AddrPortFrom(c.Gateway, c.DNSPort).String()
	probes := []func() PodCheck{
		loopbackCheck, icmpCheck,
		func() PodCheck { return udpCheck("udp 192.0.2.1:9", "192.0.2.1:9") },
		func() PodCheck { return udpCheck("udp [2606:4700:4700::1111]:53", "[2606:4700:4700::1111]:53") },
		func() PodCheck { return blockedCheck(ctx, "tcp [fd00::1]:443", "tcp", "[fd00::1]:443") },
		// The gateway may be rolling out (or its service rules catching
		// up): the checks that need it to answer wait for it a while.
		func() PodCheck {
			return untilOK(ctx, GatewayWait, 500*time.Millisecond, func() PodCheck { return openCheck(ctx, "tcp gateway dns "+gw, gw) })
		},
		func() PodCheck {
			return untilOK(ctx, GatewayWait, 500*time.Millisecond, func() PodCheck {
				return deniedHTTPCheck(ctx, "http 169.254.169.254:80 via the gateway", "169.254.169.254:80")
			})
		},
	}
	rc.Checks = make([]PodCheck, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() { rc.Checks[i] = p() })
	}
	wg.Wait()
	return rc, failedChecks(rc)
}

// failedChecks is nil when every check of rc passed (and marks rc OK).
func failedChecks(rc *PodReceipt) error {
	var failed []string
	for _, ch := range rc.Checks {
		if !ch.OK {
			failed = append(failed, fmt.Sprintf("%s: want %s, got %s", ch.Name, ch.Want, ch.Got))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: the pod fence's self-test failed: %s", ErrNotVerified, strings.Join(failed, "; "))
	}
	rc.OK = true
	return nil
}

// dialCheck connects to addr (TCP) for c; a failure is c's result.
func dialCheck(ctx context.Context, c *PodCheck, addr string) net.Conn {
	d := net.Dialer{Timeout: 3 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		c.Got = shortErr(err)
		return nil
	}
	return conn
}

// openCheck dials addr (TCP) and wants it to connect.
func openCheck(ctx context.Context, name, addr string) PodCheck {
	c := PodCheck{Name: name, Want: "open"}
	if conn := dialCheck(ctx, &c, addr); conn != nil {
		conn.Close()
		c.Got, c.OK = "connected", true
	}
	return c
}

// deniedHTTPCheck sends a plain HTTP request to addr and wants the
// gateway's 403.
func deniedHTTPCheck(ctx context.Context, name, addr string) PodCheck {
	c := PodCheck{Name: name, Want: "403"}
	conn := dialCheck(ctx, &c, addr)
	if conn == nil {
		return c
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	host, _, _ := net.SplitHostPort(addr)
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		c.Got = shortErr(err)
		return c
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		c.Got = shortErr(err)
		return c
	}
	c.Got = strings.TrimSpace(line)
	f := strings.Fields(c.Got)
	c.OK = len(f) >= 2 && f[1] == "403"
	return c
}
