package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"vak/internal/egress/policy"
)

// ErrDialDenied is wrapped by *DialDeniedError.
var ErrDialDenied = errors.New("destination address refused")

// DialDeniedError means the destination resolved only to addresses the
// policy does not permit (non-public without a CIDR rule).
type DialDeniedError struct {
	Host    string
	Refused []netip.Addr
}

func (e *DialDeniedError) Error() string {
	if len(e.Refused) == 0 {
		return fmt.Sprintf("%s: no permitted address", e.Host)
	}
	return fmt.Sprintf("%s resolves only to non-public %v and no rule lists a CIDR for them", e.Host, e.Refused)
}

func (e *DialDeniedError) Unwrap() error { return ErrDialDenied }

// dialUpstream is the transport's DialContext: addr is "name:port" or
// "ip:port" exactly as the gateway built the URL from its own decision, never
// anything the client supplied as an address. Names are resolved by the
// gateway, non-public results are filtered by policy, and only the remaining
// addresses are dialled.
func (p *Proxy) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	hostStr, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, err
	}
	h, err := policy.NormalizeHost(hostStr)
	if err != nil {
		return nil, err
	}
	return p.dialHost(ctx, h, uint16(port))
}

// dialHost resolves and dials a decided destination.
func (p *Proxy) dialHost(ctx context.Context, h policy.Host, port uint16) (net.Conn, error) {
	pol := p.Policy()
	var addrs, refused []netip.Addr
	if h.IsIP() {
		if !pol.AddrPermitted("", port, h.Addr) {
			return nil, &DialDeniedError{Host: h.String(), Refused: []netip.Addr{h.Addr}}
		}
		addrs = []netip.Addr{h.Addr}
	} else {
		all, err := p.resolve(ctx, h.Name)
		if err != nil {
			return nil, err
		}
		for _, a := range all {
			if pol.AddrPermitted(h.Name, port, a) {
				addrs = append(addrs, a)
			} else {
				refused = append(refused, a)
			}
		}
		if len(addrs) == 0 {
			return nil, &DialDeniedError{Host: h.Name, Refused: refused}
		}
	}
	dial := p.DialContext
	if dial == nil {
		d := &net.Dialer{Timeout: p.limits().DialTimeout}
		dial = d.DialContext
	}
	var errs []error
	for _, a := range addrs {
		c, err := dial(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %s: %w", h, errors.Join(errs...))
}

func (p *Proxy) resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	if p.Resolve == nil {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	}
	return p.Resolve(ctx, name)
}
