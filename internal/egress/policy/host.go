package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Host name errors. NormalizeHost and ParseAuthority wrap one of these.
var (
	// ErrBadHost means a host name is not a well-formed DNS name or IP literal.
	ErrBadHost = errors.New("malformed host")
	// ErrBadPort means a port is missing, not decimal, zero or above 65535.
	ErrBadPort = errors.New("malformed port")
)

// MaxHostLen is the longest host name accepted (RFC 1035, without the root dot).
const MaxHostLen = 253

// idnaProfile maps a name the way a resolver would look it up (case folding,
// width and compatibility mappings, punycode), but leaves the ASCII character
// check to NormalizeHost so that '_' (common in real names) is accepted while
// everything else outside [a-z0-9-] is not. CheckHyphens is off because labels
// such as "r3---sn-abc" are in everyday use.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.StrictDomainName(false),
	idna.CheckHyphens(false),
)

// Host is a normalised destination: exactly one of Name and Addr is set.
type Host struct {
	// Name is a lower-case ASCII (punycode) DNS name without a trailing dot.
	Name string
	// Addr is set when the destination was written as an IP literal.
	Addr netip.Addr
}

// IsIP reports whether h is an IP literal.
func (h Host) IsIP() bool { return h.Addr.IsValid() }

// String is the name, or the IP literal (IPv6 without brackets).
func (h Host) String() string {
	if h.IsIP() {
		return h.Addr.String()
	}
	return h.Name
}

// NormalizeHost turns a host as written on the wire (Host header, SNI, CONNECT
// authority without port, DNS question) into its canonical form: IP literals
// are parsed (brackets allowed for IPv6, zones refused), names are
// case-folded, IDNA-mapped to punycode, and stripped of one trailing dot.
// Anything that is not a plain DNS name is refused: NUL and other control
// bytes, '%' escapes, '/', '\', '@', ':', spaces, empty labels, labels longer
// than 63 bytes, names longer than 253, and names whose last label is numeric
// or hexadecimal (which some resolvers would read as an IPv4 address).
func NormalizeHost(s string) (Host, error) {
	if s == "" {
		return Host{}, fmt.Errorf("%w: empty", ErrBadHost)
	}
	if len(s) > 4*MaxHostLen {
		return Host{}, fmt.Errorf("%w: too long", ErrBadHost)
	}
	if strings.HasPrefix(s, "[") {
		if !strings.HasSuffix(s, "]") {
			return Host{}, fmt.Errorf("%w: %q: unbalanced bracket", ErrBadHost, s)
		}
		a, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return Host{}, fmt.Errorf("%w: %q: bad IPv6 literal", ErrBadHost, s)
		}
		return Host{Addr: a}, nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c == 0x7f {
			return Host{}, fmt.Errorf("%w: %q: control or space byte at %d", ErrBadHost, s, i)
		}
		switch c {
		case '%', '/', '\\', '@', '?', '#', '[', ']', '"', '<', '>', '^', '`', '{', '|', '}', ',', ';', '=', '!', '$', '&', '\'', '(', ')', '+', '~':
			return Host{}, fmt.Errorf("%w: %q: character %q not allowed", ErrBadHost, s, c)
		}
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return Host{}, fmt.Errorf("%w: %q: zoned address", ErrBadHost, s)
		}
		return Host{Addr: a}, nil
	}
	if strings.Contains(s, ":") {
		return Host{}, fmt.Errorf("%w: %q: ':' in name", ErrBadHost, s)
	}
	if !utf8.ValidString(s) {
		return Host{}, fmt.Errorf("%w: %q: invalid UTF-8", ErrBadHost, s)
	}
	name := strings.TrimSuffix(s, ".")
	ascii, err := idnaProfile.ToASCII(name)
	if err != nil {
		return Host{}, fmt.Errorf("%w: %q: %v", ErrBadHost, s, err)
	}
	if ascii != name {
		// Mapping changed the name: the result must itself be canonical, or
		// two spellings could normalise to names that compare differently.
		if again, err := idnaProfile.ToASCII(ascii); err != nil || again != ascii {
			return Host{}, fmt.Errorf("%w: %q: IDNA mapping is not stable", ErrBadHost, s)
		}
	}
	if err := checkName(ascii); err != nil {
		return Host{}, fmt.Errorf("%w: %q: %v", ErrBadHost, s, err)
	}
	return Host{Name: ascii}, nil
}

// checkName validates an already case-folded ASCII name.
func checkName(n string) error {
	if n == "" {
		return errors.New("empty name")
	}
	if len(n) > MaxHostLen {
		return errors.New("name longer than 253 bytes")
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" {
			return errors.New("empty label")
		}
		if len(l) > 63 {
			return errors.New("label longer than 63 bytes")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q not allowed in a DNS name", c)
			}
		}
	}
	last := labels[len(labels)-1]
	if isNumericLabel(last) {
		return fmt.Errorf("numeric last label %q (looks like an IPv4 address)", last)
	}
	return nil
}

// isNumericLabel reports decimal ("1") or hexadecimal ("0x7f") labels, which
// inet_aton-style parsers accept as parts of an IPv4 address.
func isNumericLabel(l string) bool {
	if strings.HasPrefix(l, "0x") {
		l = l[2:]
		if l == "" {
			return true
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

// ParseAuthority parses "host:port" (as in a CONNECT request or a Host
// header). When the port is absent, defaultPort is used if it is non-zero and
// the authority is refused otherwise. Userinfo is refused.
func ParseAuthority(s string, defaultPort uint16) (Host, uint16, error) {
	if s == "" {
		return Host{}, 0, fmt.Errorf("%w: empty authority", ErrBadHost)
	}
	hostPart, portPart, hasPort := splitHostPort(s)
	var port uint16
	if hasPort {
		p, err := ParsePort(portPart)
		if err != nil {
			return Host{}, 0, err
		}
		port = p
	} else {
		if defaultPort == 0 {
			return Host{}, 0, fmt.Errorf("%w: %q: no port", ErrBadPort, s)
		}
		port = defaultPort
	}
	h, err := NormalizeHost(hostPart)
	if err != nil {
		return Host{}, 0, err
	}
	return h, port, nil
}

// splitHostPort splits an authority; an unbracketed IPv6 literal has no port.
func splitHostPort(s string) (host, port string, hasPort bool) {
	if strings.HasPrefix(s, "[") {
		i := strings.LastIndex(s, "]")
		if i < 0 {
			return s, "", false
		}
		if i+1 < len(s) && s[i+1] == ':' {
			return s[:i+1], s[i+2:], true
		}
		if i+1 == len(s) {
			return s, "", false
		}
		// Garbage after "]": leave it in the host so NormalizeHost refuses it.
		return s, "", false
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, "", false
	}
	if strings.Count(s, ":") > 1 {
		// Unbracketed IPv6 literal (no port possible).
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// ParsePort parses a decimal TCP/UDP port in 1..65535.
func ParsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 {
		return 0, fmt.Errorf("%w: %q", ErrBadPort, s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: %q", ErrBadPort, s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: %q", ErrBadPort, s)
	}
	return uint16(n), nil
}

// FormatAuthority is the inverse of ParseAuthority: "name:port",
// "1.2.3.4:port" or "[::1]:port".
func FormatAuthority(h Host, port uint16) string {
	return netJoin(hostLiteral(h), port)
}

// HostLiteral is h as written in a URL authority (IPv6 bracketed).
func hostLiteral(h Host) string {
	if h.IsIP() && h.Addr.Is6() {
		return "[" + h.Addr.String() + "]"
	}
	return h.String()
}

// URLHost is the authority for a URL: the port is omitted when it is the
// scheme's default.
func URLHost(h Host, port uint16, scheme string) string {
	if (scheme == "https" && port == 443) || (scheme == "http" && port == 80) {
		return hostLiteral(h)
	}
	return netJoin(hostLiteral(h), port)
}

func netJoin(host string, port uint16) string {
	return host + ":" + strconv.Itoa(int(port))
}

// HostPattern matches normalised host names. It is one of: "*" (every name),
// "*.example.com" (every name strictly below example.com, any depth, never
// example.com itself), or an exact name. Patterns never match IP literals;
// rules use CIDRs for those.
type HostPattern struct {
	any    bool
	suffix string // ".example.com" for "*.example.com"
	exact  string
}

// ParseHostPattern parses and normalises a host pattern. A '*' is allowed only
// as the whole leftmost label.
func ParseHostPattern(s string) (HostPattern, error) {
	if s == "*" {
		return HostPattern{any: true}, nil
	}
	rest, wild := strings.CutPrefix(s, "*.")
	if strings.Contains(rest, "*") {
		return HostPattern{}, fmt.Errorf("%w: %q: '*' is allowed only as the whole leftmost label (\"*.example.com\")", ErrBadHost, s)
	}
	h, err := NormalizeHost(rest)
	if err != nil {
		return HostPattern{}, err
	}
	if h.IsIP() {
		return HostPattern{}, fmt.Errorf("%w: %q is an IP address: use cidrs for IP destinations", ErrBadHost, s)
	}
	if wild {
		return HostPattern{suffix: "." + h.Name}, nil
	}
	return HostPattern{exact: h.Name}, nil
}

// MustHostPattern is ParseHostPattern for constants in tests and defaults; it
// panics on error.
func MustHostPattern(s string) HostPattern {
	p, err := ParseHostPattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// Match reports whether the normalised name matches. Callers pass
// Host.Name from NormalizeHost; an empty name never matches.
func (p HostPattern) Match(name string) bool {
	switch {
	case name == "":
		return false
	case p.any:
		return true
	case p.suffix != "":
		return len(name) > len(p.suffix) && strings.HasSuffix(name, p.suffix)
	default:
		return name == p.exact
	}
}

// IsAny reports whether the pattern is "*".
func (p HostPattern) IsAny() bool { return p.any }

// String is the canonical pattern text.
func (p HostPattern) String() string {
	switch {
	case p.any:
		return "*"
	case p.suffix != "":
		return "*" + p.suffix
	default:
		return p.exact
	}
}
