// Package dns is the gateway's name resolution: the Resolver the gateway
// itself uses to find the addresses it dials (static overrides from trusted
// config first, then an upstream server or the system resolver), and the
// policy-aware DNS Server the sandbox is pointed at, which answers only names
// the policy allows and answers every other name NXDOMAIN without sending it
// anywhere, so DNS cannot carry data out.
package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// Defaults.
const (
	DefaultTimeout = 5 * time.Second
	// MinTTL and MaxTTL clamp how long answers are cached and served.
	MinTTL = 5 * time.Second
	MaxTTL = 5 * time.Minute
	// SystemTTL is the cache time for system resolver answers (no TTL known).
	SystemTTL = 30 * time.Second
	// OverrideTTL is the TTL served for static overrides.
	OverrideTTL = 60 * time.Second
	maxCache    = 4096
)

// ErrNotFound means the name has no A or AAAA records.
var ErrNotFound = errors.New("dns: no addresses")

// Resolver resolves names for the gateway. The zero value uses the system
// resolver with no overrides. Fields must not change after first use.
type Resolver struct {
	// Overrides maps normalised names to fixed addresses (trusted config).
	Overrides map[string][]netip.Addr
	// Upstreams are "ip:port" DNS servers queried in order; empty means the
	// system resolver (net.DefaultResolver).
	Upstreams []string
	// Timeout bounds one lookup; 0 means DefaultTimeout.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	cache map[string]cacheEntry
}

type cacheEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

func (r *Resolver) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Lookup returns the IPv4 and IPv6 addresses of a normalised name and how
// long they may be cached.
func (r *Resolver) Lookup(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	if a, ok := r.Overrides[name]; ok {
		return slices.Clone(a), OverrideTTL, nil
	}
	now := r.now()
	r.mu.Lock()
	if e, ok := r.cache[name]; ok && now.Before(e.expires) {
		r.mu.Unlock()
		return slices.Clone(e.addrs), e.expires.Sub(now), nil
	}
	r.mu.Unlock()
	timeout := r.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var addrs []netip.Addr
	var ttl time.Duration
	var err error
	if len(r.Upstreams) == 0 {
		addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		ttl = SystemTTL
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			err = fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		for i := range addrs {
			addrs[i] = addrs[i].WithZone("")
		}
	} else {
		addrs, ttl, err = r.queryUpstreams(ctx, name)
	}
	if err != nil {
		return nil, 0, err
	}
	if len(addrs) == 0 {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	ttl = min(max(ttl, MinTTL), MaxTTL)
	r.mu.Lock()
	if r.cache == nil || len(r.cache) >= maxCache {
		r.cache = map[string]cacheEntry{}
	}
	r.cache[name] = cacheEntry{addrs: slices.Clone(addrs), expires: now.Add(ttl)}
	r.mu.Unlock()
	return addrs, ttl, nil
}

// queryUpstreams asks for A and AAAA in parallel at the first upstream that
// answers.
func (r *Resolver) queryUpstreams(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	var errs []error
	for _, up := range r.Upstreams {
		type res struct {
			addrs []netip.Addr
			ttl   time.Duration
			err   error
		}
		ch := make(chan res, 2)
		for _, qt := range []uint16{mdns.TypeA, mdns.TypeAAAA} {
			go func() {
				a, ttl, err := exchange(ctx, up, name, qt)
				ch <- res{a, ttl, err}
			}()
		}
		var addrs []netip.Addr
		ttl := MaxTTL
		var failed int
		var lastErr error
		for range 2 {
			x := <-ch
			if x.err != nil {
				failed++
				lastErr = x.err
				continue
			}
			addrs = append(addrs, x.addrs...)
			if len(x.addrs) > 0 {
				ttl = min(ttl, x.ttl)
			}
		}
		if failed == 2 {
			errs = append(errs, lastErr)
			continue
		}
		return addrs, ttl, nil
	}
	return nil, 0, fmt.Errorf("dns: resolving %s: %w", name, errors.Join(errs...))
}

func exchange(ctx context.Context, upstream, name string, qtype uint16) ([]netip.Addr, time.Duration, error) {
	m := new(mdns.Msg)
	m.SetQuestion(mdns.Fqdn(name), qtype)
	m.RecursionDesired = true
	c := &mdns.Client{Net: "udp"}
	resp, _, err := c.ExchangeContext(ctx, m, upstream)
	if err == nil && resp.Truncated {
		c.Net = "tcp"
		resp, _, err = c.ExchangeContext(ctx, m, upstream)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("dns: %s: %w", upstream, err)
	}
	switch resp.Rcode {
	case mdns.RcodeSuccess:
	case mdns.RcodeNameError:
		return nil, 0, nil
	default:
		return nil, 0, fmt.Errorf("dns: %s: %s for %s", upstream, mdns.RcodeToString[resp.Rcode], name)
	}
	// Follow the CNAME chain from the question name through the answer.
	owner := strings.ToLower(mdns.Fqdn(name))
	var addrs []netip.Addr
	ttl := MaxTTL
	for range 16 {
		next := ""
		for _, rr := range resp.Answer {
			h := rr.Header()
			if !strings.EqualFold(h.Name, owner) {
				continue
			}
			switch v := rr.(type) {
			case *mdns.A:
				if a, ok := netip.AddrFromSlice(v.A.To4()); ok && qtype == mdns.TypeA {
					addrs = append(addrs, a)
					ttl = min(ttl, time.Duration(h.Ttl)*time.Second)
				}
			case *mdns.AAAA:
				if a, ok := netip.AddrFromSlice(v.AAAA.To16()); ok && qtype == mdns.TypeAAAA {
					addrs = append(addrs, a)
					ttl = min(ttl, time.Duration(h.Ttl)*time.Second)
				}
			case *mdns.CNAME:
				next = strings.ToLower(v.Target)
				ttl = min(ttl, time.Duration(h.Ttl)*time.Second)
			}
		}
		if len(addrs) > 0 || next == "" {
			break
		}
		owner = next
	}
	return addrs, ttl, nil
}
