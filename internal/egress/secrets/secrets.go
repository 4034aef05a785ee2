// Package secrets keeps real credentials out of the sandbox. Each secret has
// a per-session placeholder that the sandbox sees instead of the value; the
// gateway swaps the placeholder for the value only in requests to hosts the
// secret is bound to and only where the secret may be injected (headers by
// default, query and body when configured), refuses requests that carry a
// placeholder anywhere else, and redacts real values out of responses
// (streaming, across read boundaries) so an allowed host cannot echo a
// secret back into the sandbox.
//
// Nothing in this package formats a secret value or a placeholder into an
// error or a log line; errors name the secret.
package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"vak/internal/egress/policy"
)

// PlaceholderPrefix starts every placeholder; the rest is 32 random base32
// characters (160 bits).
const PlaceholderPrefix = "vakph_"

// PlaceholderLen is the length of a placeholder.
const PlaceholderLen = len(PlaceholderPrefix) + 32

// MinValueLen is the shortest secret value accepted: shorter values would be
// redacted out of unrelated response bytes.
const MinValueLen = 8

// Place is where a secret may be injected into a request.
type Place uint8

// Places.
const (
	Header Place = 1 << iota
	Query
	Body
)

// String is the config spelling.
func (p Place) String() string {
	var s []string
	if p&Header != 0 {
		s = append(s, "header")
	}
	if p&Query != 0 {
		s = append(s, "query")
	}
	if p&Body != 0 {
		s = append(s, "body")
	}
	return strings.Join(s, "+")
}

// ParsePlace parses one config place ("header", "query", "body").
func ParsePlace(s string) (Place, error) {
	switch s {
	case "header":
		return Header, nil
	case "query":
		return Query, nil
	case "body":
		return Body, nil
	}
	return 0, fmt.Errorf("unknown injection place %q (want header, query or body)", s)
}

// Source says where a secret's value comes from. Exactly one field is set.
type Source struct {
	// Value is inline in the trusted user config.
	Value string
	// Env names an environment variable of the gateway process.
	Env string
	// File is a path readable by the gateway (trailing newlines trimmed).
	File string
}

// Spec is a validated secret definition, before its value is loaded.
type Spec struct {
	// Name is the environment variable name the sandbox sees.
	Name   string
	Source Source
	Hosts  []policy.HostPattern
	Inject Place
	// AllowPlaintext lets the placeholder be substituted into requests that
	// leave the gateway unencrypted (plain HTTP, raw TCP); by default only
	// requests the gateway sends over TLS it verified receive the value.
	AllowPlaintext bool
	// AllowForeignCredentials lets requests to the secret's hosts carry
	// credentials other than the placeholder in credential headers.
	AllowForeignCredentials bool
	// ConfigFile names the file the spec came from, for load errors.
	ConfigFile string
	// AWS makes the secret a part of an AWS access key (aws.go); such a
	// secret has no Inject place.
	AWS AWSPart
}

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// ValidName reports whether name can be an environment variable name.
func ValidName(name string) bool { return nameRE().MatchString(name) }

// Secret is a loaded secret. Its value is unexported and never formatted.
type Secret struct {
	Name   string
	Hosts  []policy.HostPattern
	Inject Place
	// AllowPlaintext and AllowForeignCredentials are the Spec's opt-outs.
	AllowPlaintext          bool
	AllowForeignCredentials bool
	// AWS is the Spec's: a part of the AWS access key.
	AWS   AWSPart
	value []byte
	// phantom, when set, is the secret's placeholder (a login token's,
	// which the sandbox got in a token response, not in its environment).
	phantom string
	encOnce sync.Once
	enc     [][]byte
}

// String never reveals the value.
func (s *Secret) String() string { return "secret " + s.Name }

// Errors.
var (
	// ErrLoad wraps failures to read a secret's value.
	ErrLoad = errors.New("secrets: cannot load secret")
	// ErrBlocked means a request carried a placeholder (or a real value)
	// somewhere it may not go. It is wrapped by *BlockedError.
	ErrBlocked = errors.New("secrets: request blocked")
	// ErrInResponse means a real secret value appeared in a stream that
	// cannot be rewritten (WebSocket, raw TCP); the stream is cut.
	ErrInResponse = errors.New("secrets: secret value in a response stream that cannot be redacted")
)

// BlockedError names the secret, host and place of a blocked request.
type BlockedError struct {
	Secret string
	Host   string
	Where  string
	// RealValue is true when the real value (not the placeholder) was seen.
	RealValue bool
	// Plaintext is true when the placeholder would have been substituted
	// but the request leaves the gateway unencrypted.
	Plaintext bool
}

func (e *BlockedError) Error() string {
	what := "placeholder of secret " + e.Secret
	if e.RealValue {
		what = "value of secret " + e.Secret
	}
	if e.Plaintext {
		return fmt.Sprintf("%s in request %s to %s is not substituted over an unencrypted connection (the secret does not set allow_plaintext = true)", what, e.Where, e.Host)
	}
	return fmt.Sprintf("%s in request %s to %s is not allowed", what, e.Where, e.Host)
}

func (e *BlockedError) Unwrap() error { return ErrBlocked }

// Load reads the values of specs. getenv nil means os.Getenv.
func Load(specs []Spec, getenv func(string) string) ([]*Secret, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var out []*Secret
	for _, sp := range specs {
		var v string
		// The key path at fault, as in every other config error:
		// "config.toml: secrets.NAME.env: ...".
		key := "secrets." + sp.Name
		fail := func(format string, args ...any) error {
			file := sp.ConfigFile
			if file == "" {
				file = "config"
			}
			return fmt.Errorf("%w: %s: %s: %s", ErrLoad, file, key, fmt.Sprintf(format, args...))
		}
		switch {
		case sp.Source.Value != "":
			key += ".value"
			v = sp.Source.Value
		case sp.Source.Env != "":
			key += ".env"
			v = getenv(sp.Source.Env)
			if v == "" {
				return nil, fail("environment variable %s is empty or unset", sp.Source.Env)
			}
		case sp.Source.File != "":
			key += ".file"
			b, err := os.ReadFile(sp.Source.File)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", fail("cannot read %s", sp.Source.File), err)
			}
			v = strings.TrimRight(string(b), "\r\n")
		default:
			return nil, fail("no value source")
		}
		if len(v) < MinValueLen {
			return nil, fail("value is %d bytes; values shorter than %d bytes cannot be redacted safely", len(v), MinValueLen)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fail("value contains control characters")
		}
		inject := sp.Inject
		if inject == 0 && sp.AWS == AWSNone {
			inject = Header
		}
		out = append(out, &Secret{Name: sp.Name, Hosts: slices.Clone(sp.Hosts), Inject: inject, AWS: sp.AWS,
			AllowPlaintext: sp.AllowPlaintext, AllowForeignCredentials: sp.AllowForeignCredentials, value: []byte(v)})
	}
	return out, nil
}

// NewPhantom is a login token as a secret (internal/egress/logins): its
// placeholder is the phantom the sandbox received in place of value, and
// it is not part of the sandbox's environment (Session.Env). Both must be
// at least MinValueLen bytes without control characters, and differ.
func NewPhantom(name, value, phantom string, inject Place, hosts []policy.HostPattern) (*Secret, error) {
	bad := func(v string) bool {
		return len(v) < MinValueLen || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f })
	}
	if bad(value) || bad(phantom) || value == phantom || len(hosts) == 0 {
		return nil, fmt.Errorf("%w: %s: a login token and its phantom must be at least %d bytes, printable, different, and bound to a host", ErrLoad, name, MinValueLen)
	}
	return &Secret{Name: name, Hosts: slices.Clone(hosts), Inject: inject, value: []byte(value), phantom: phantom}, nil
}

// NewForTest builds a loaded secret directly (tests in other packages).
func NewForTest(name, value string, inject Place, hosts ...string) *Secret {
	s := &Secret{Name: name, Inject: inject, value: []byte(value)}
	for _, h := range hosts {
		s.Hosts = append(s.Hosts, policy.MustHostPattern(h))
	}
	return s
}

// minEncodedLen is the shortest encoded form matched: shorter cores would
// match unrelated bytes.
const minEncodedLen = 8

// encoded returns the common encodings of the value that the matchers look
// for besides the value itself: base64 (standard and URL alphabets) at each
// of the three alignments the value can have inside a longer encoded
// string (only the characters determined by the value alone), hex (lower
// and upper case) and URL percent-encoding. Forms equal to the value or
// shorter than minEncodedLen are left out.
func (s *Secret) encoded() [][]byte {
	s.encOnce.Do(func() {
		seen := map[string]bool{string(s.value): true}
		add := func(e string) {
			if len(e) >= minEncodedLen && !seen[e] {
				seen[e] = true
				s.enc = append(s.enc, []byte(e))
			}
		}
		n := len(s.value)
		for k := range 3 {
			in := append(make([]byte, k), s.value...)
			start, end := (8*k+5)/6, (8*(k+n))/6
			for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
				add(enc.EncodeToString(in)[start:end])
			}
		}
		h := hex.EncodeToString(s.value)
		add(h)
		add(strings.ToUpper(h))
		add(url.QueryEscape(string(s.value)))
		add(url.PathEscape(string(s.value)))
	})
	return s.enc
}

func (s *Secret) boundTo(host policy.Host) bool {
	if host.IsIP() {
		return false
	}
	for _, p := range s.Hosts {
		if p.Match(host.Name) {
			return true
		}
	}
	return false
}

// Session is the set of secrets with this session's placeholders. It is
// immutable; a reload makes a new Session that keeps the placeholders of
// secrets that still exist.
type Session struct {
	secrets      []*Secret
	placeholders []string // parallel to secrets
	folded       []string // the values, ASCII lower-cased (parallel)
	byName       map[string]int

	redact *matcher // real value -> placeholder
	// aws locates the parts of the AWS access key, if any (aws.go).
	aws *awsKey
	// scanCache holds request matchers per (host, place).
	mu        sync.Mutex
	scanCache map[scanKey]*matcher
}

type scanKey struct {
	host  policy.Host
	place Place
	where string
	// clear is set for requests that leave the gateway unencrypted.
	clear bool
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func newPlaceholder() string {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("secrets: crypto/rand failed: " + err.Error())
	}
	return PlaceholderPrefix + strings.ToLower(b32.EncodeToString(b[:]))
}

// NewSession assigns placeholders: secrets already present in prev (by name)
// keep theirs, new ones get fresh random placeholders.
func NewSession(secrets []*Secret, prev *Session) *Session {
	s := &Session{byName: map[string]int{}, scanCache: map[scanKey]*matcher{}}
	var redact []literal
	for i, sec := range secrets {
		ph := sec.phantom
		if ph == "" && prev != nil {
			if j, ok := prev.byName[sec.Name]; ok {
				ph = prev.placeholders[j]
			}
		}
		if ph == "" {
			ph = newPlaceholder()
		}
		s.secrets = append(s.secrets, sec)
		s.placeholders = append(s.placeholders, ph)
		s.folded = append(s.folded, string(foldASCII(sec.value)))
		s.byName[sec.Name] = i
		redact = append(redact, literal{from: sec.value, to: []byte(ph), secret: i})
		for _, enc := range sec.encoded() {
			redact = append(redact, literal{from: enc, to: []byte(ph), secret: i})
		}
	}
	s.redact = newMatcher(redact)
	s.aws = findAWSKey(secrets)
	return s
}

// Len is the number of secrets.
func (s *Session) Len() int {
	if s == nil {
		return 0
	}
	return len(s.secrets)
}

// Env returns NAME -> placeholder for the sandbox's environment (login
// tokens' phantoms are not part of it).
func (s *Session) Env() map[string]string {
	m := map[string]string{}
	if s == nil {
		return m
	}
	for i, sec := range s.secrets {
		if sec.phantom == "" {
			m[sec.Name] = s.placeholders[i]
		}
	}
	return m
}

// Names returns the secret names of the given indexes, sorted, deduplicated.
func (s *Session) Names(idx []int) []string {
	if s.Len() == 0 {
		return nil
	}
	var out []string
	for _, i := range idx {
		out = append(out, s.secrets[i].Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// requestMatcher returns the literals for scanning a request part bound for
// host: placeholders of secrets bound to host and injectable at place are
// replaced by the value (when the request is encrypted, or the secret allows
// plaintext); every other placeholder, and the real value of any secret not
// bound to host, blocks the request.
func (s *Session) requestMatcher(host policy.Host, place Place, where string, tls bool) *matcher {
	key := scanKey{host, place, where, !tls}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.scanCache[key]; ok {
		return m
	}
	var lits []literal
	for i, sec := range s.secrets {
		bound := sec.boundTo(host)
		ph := []byte(s.placeholders[i])
		switch {
		case bound && sec.Inject&place != 0 && (tls || sec.AllowPlaintext):
			to := sec.value
			if place == Query {
				to = []byte(url.QueryEscape(string(sec.value)))
			}
			lits = append(lits, literal{from: ph, to: to, secret: i})
		case bound && sec.Inject&place != 0:
			lits = append(lits, literal{from: ph, secret: i, block: &BlockedError{Secret: sec.Name, Host: host.String(), Where: where, Plaintext: true}})
		default:
			lits = append(lits, literal{from: ph, secret: i, block: &BlockedError{Secret: sec.Name, Host: host.String(), Where: where}})
		}
		if !bound {
			be := &BlockedError{Secret: sec.Name, Host: host.String(), Where: where, RealValue: true}
			lits = append(lits, literal{from: sec.value, secret: i, block: be})
			for _, enc := range sec.encoded() {
				lits = append(lits, literal{from: enc, secret: i, block: be})
			}
		}
	}
	m := newMatcher(lits)
	if len(s.scanCache) > 1024 {
		clear(s.scanCache)
	}
	s.scanCache[key] = m
	return m
}

// foldASCII lower-cases ASCII letters, keeping the length.
func foldASCII(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// checkFolded refuses str when it contains, ignoring ASCII case, any
// placeholder, or the real value of a secret not bound to host (of any
// secret when anyValue is set). It is for request parts that are never
// substituted and whose case may be changed on the way (header names are
// canonicalised, host names lower-cased).
func (s *Session) checkFolded(host policy.Host, str, where string, anyValue bool) error {
	if s.Len() == 0 || len(str) < MinValueLen {
		return nil
	}
	for i, sec := range s.secrets {
		// Placeholders are lower case already.
		if containsFold(str, s.placeholders[i]) {
			return &BlockedError{Secret: sec.Name, Host: host.String(), Where: where}
		}
		if (anyValue || !sec.boundTo(host)) && containsFold(str, s.folded[i]) {
			return &BlockedError{Secret: sec.Name, Host: host.String(), Where: where, RealValue: true}
		}
	}
	return nil
}

// containsFold reports whether s contains lower (already ASCII
// lower-cased), ignoring ASCII case in s, without allocating.
func containsFold(s, lower string) bool {
	n := len(lower)
	if n == 0 {
		return true
	}
	for i := 0; i+n <= len(s); i++ {
		j := 0
		for ; j < n; j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != lower[j] {
				break
			}
		}
		if j == n {
			return true
		}
	}
	return false
}

// CheckName refuses a host name (a CONNECT authority, SNI, Host header or
// DNS query name) that contains any placeholder or any secret's real value,
// ignoring case: names travel in the clear to resolvers and upstreams and
// are never substituted.
func (s *Session) CheckName(name string) error {
	// The error names the host scrubbed: it is shown to the sandbox and
	// written to receipts.
	return s.checkFolded(policy.Host{Name: s.Scrub(name)}, name, "host name", true)
}

// RewriteRequest checks every part of the request head bound for host and
// substitutes placeholders where the secret allows: the method and header
// names are never substituted (a placeholder there, or an unbound real value,
// blocks the request, ignoring case); header values (including inside Basic
// credentials) and the query receive values when injection is configured;
// the path and URL user information never do. tls reports whether the
// request leaves the gateway over TLS it verified; without it placeholders
// are substituted only for secrets with AllowPlaintext. It returns the
// indexes of the secrets it substituted, or a *BlockedError. The body is
// handled by RequestBody, trailers by Trailer.
func (s *Session) RewriteRequest(host policy.Host, r *http.Request, tls bool) ([]int, error) {
	if s.Len() == 0 {
		return nil, nil
	}
	if err := s.checkFolded(host, r.Method, "method", false); err != nil {
		return nil, err
	}
	pm := s.requestMatcher(host, 0, "method", tls)
	if _, _, err := pm.replaceAll([]byte(r.Method)); err != nil {
		return nil, err
	}
	var used []int
	hm := s.requestMatcher(host, Header, "header", tls)
	for k, vs := range r.Header {
		if err := s.checkFolded(host, k, "header name", false); err != nil {
			return nil, err
		}
		for j, v := range vs {
			nv, u, err := hm.replaceAllString(v)
			if err != nil {
				return nil, withWhere(err, "header "+k)
			}
			used = append(used, u...)
			// rewriteBasic's own test of the scheme, without its copy.
			if scheme, _, ok := strings.Cut(nv, " "); ok && (k == "Authorization" || k == "Proxy-Authorization") && strings.EqualFold(scheme, "basic") {
				nv2, u2, err := s.rewriteBasic(hm, []byte(nv))
				if err != nil {
					return nil, withWhere(err, "header "+k+" (Basic credentials)")
				}
				nv = string(nv2)
				used = append(used, u2...)
			}
			vs[j] = nv
		}
	}
	// The path and user information never receive secrets.
	pm = s.requestMatcher(host, 0, "path", tls)
	if _, _, err := pm.replaceAll([]byte(r.URL.Path)); err != nil {
		return nil, err
	}
	if _, _, err := pm.replaceAll([]byte(r.URL.RawPath)); err != nil {
		return nil, err
	}
	if u := r.URL.User; u != nil {
		um := s.requestMatcher(host, 0, "URL user information", tls)
		pw, _ := u.Password()
		for _, part := range []string{u.Username(), pw, u.String()} {
			if _, _, err := um.replaceAll([]byte(part)); err != nil {
				return nil, err
			}
		}
	}
	if r.URL.RawQuery != "" {
		qm := s.requestMatcher(host, Query, "query", tls)
		// Check the decoded form too, so an escaped placeholder or value
		// cannot slip past; substitution itself works on the literal form.
		if dq, err := url.QueryUnescape(r.URL.RawQuery); err == nil {
			if _, _, err := qm.replaceAll([]byte(dq)); err != nil {
				return nil, err
			}
		}
		nq, u, err := qm.replaceAll([]byte(r.URL.RawQuery))
		if err != nil {
			return nil, err
		}
		used = append(used, u...)
		r.URL.RawQuery = string(nq)
	}
	return used, nil
}

// Trailer checks request trailers bound for host: placeholders are never
// substituted into trailers, so any placeholder blocks, as does the real
// value of a secret not bound to host (in names, ignoring case, or values).
func (s *Session) Trailer(host policy.Host, tr http.Header) error {
	if s.Len() == 0 {
		return nil
	}
	m := s.requestMatcher(host, 0, "trailer", true)
	for k, vs := range tr {
		if err := s.checkFolded(host, k, "trailer name", false); err != nil {
			return err
		}
		for _, v := range vs {
			if _, _, err := m.replaceAll([]byte(v)); err != nil {
				return withWhere(err, "trailer "+k)
			}
		}
	}
	return nil
}

// CredentialHeaders are the request headers treated as credentials by
// ForeignCredential (canonical form).
var CredentialHeaders = []string{
	"Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "X-Auth-Token",
	"Private-Token", "X-Access-Token",
}

// ForeignCredentialError names the secret whose host received a credential
// that is not its placeholder, and the header that carried it.
type ForeignCredentialError struct {
	Secret string
	Host   string
	Header string
}

func (e *ForeignCredentialError) Error() string {
	return fmt.Sprintf("header %s of a request to %s carries a credential that is not the placeholder of secret %s, which is bound to this host; only the user's own credential may be used here (set allow_foreign_credentials = true on the secret or the rule to permit other credentials)", e.Header, e.Host, e.Secret)
}

func (e *ForeignCredentialError) Unwrap() error { return ErrBlocked }

// ForeignCredential reports a credential header in h, bound for host, that
// does not carry the placeholder of a header-injectable secret bound to
// host, when such a secret exists and does not set AllowForeignCredentials.
// Requests without credential headers pass. Call it before RewriteRequest
// (on the placeholders the sandbox sent).
func (s *Session) ForeignCredential(host policy.Host, h http.Header) error {
	if s.Len() == 0 {
		return nil
	}
	guard := -1
	var ownBuf [8]string
	own := ownBuf[:0]
	for i, sec := range s.secrets {
		if !sec.boundTo(host) || sec.Inject&Header == 0 {
			continue
		}
		own = append(own, s.placeholders[i])
		if !sec.AllowForeignCredentials && guard < 0 {
			guard = i
		}
	}
	if guard < 0 {
		return nil
	}
	carries := func(v string) bool {
		for _, ph := range own {
			if strings.Contains(v, ph) {
				return true
			}
		}
		return false
	}
	for _, k := range CredentialHeaders {
		for _, v := range h.Values(k) {
			if strings.TrimSpace(v) == "" {
				continue
			}
			ok := carries(v)
			if !ok {
				// Basic credentials hide the placeholder in base64.
				if scheme, cred, found := strings.Cut(v, " "); found && strings.EqualFold(scheme, "basic") {
					if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
						ok = carries(string(raw))
					}
				}
			}
			if !ok {
				return &ForeignCredentialError{Secret: s.secrets[guard].Name, Host: host.String(), Header: k}
			}
		}
	}
	return nil
}

func withWhere(err error, where string) error {
	var be *BlockedError
	if errors.As(err, &be) {
		c := *be
		c.Where = where
		return &c
	}
	return err
}

// rewriteBasic substitutes inside "Basic base64(user:password)".
func (s *Session) rewriteBasic(hm *matcher, v []byte) ([]byte, []int, error) {
	scheme, cred, ok := bytes.Cut(v, []byte(" "))
	if !ok || !strings.EqualFold(string(scheme), "basic") {
		return v, nil, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(cred)))
	if err != nil {
		return v, nil, nil
	}
	nraw, used, err := hm.replaceAll(raw)
	if err != nil || len(used) == 0 {
		return v, nil, err
	}
	return append(append(scheme, ' '), base64.StdEncoding.EncodeToString(nraw)...), used, nil
}

// RequestBody wraps a request body bound for host: placeholders of secrets
// that may be injected into this host's bodies are replaced (over TLS, or
// for secrets with AllowPlaintext); any other placeholder or an unbound real
// value makes Read fail with a *BlockedError before a byte of the match is
// returned. substitutes reports whether the body may change length (then the
// caller must not keep Content-Length).
func (s *Session) RequestBody(host policy.Host, body io.Reader, tls bool, used func(int)) (r io.Reader, substitutes bool) {
	if s.Len() == 0 || body == nil {
		return body, false
	}
	m := s.requestMatcher(host, Body, "body", tls)
	for _, l := range m.lits {
		if l.block == nil {
			substitutes = true
		}
	}
	return newStream(body, m, used), substitutes
}

// RedactHeader replaces real secret values in header values with their
// placeholders, in place, and renames headers whose name contains a value
// (ignoring case, since names are canonicalised) to carry the placeholder.
func (s *Session) RedactHeader(h http.Header) {
	if s.Len() == 0 {
		return
	}
	for k, vs := range h {
		for j, v := range vs {
			vs[j], _, _ = s.redact.replaceAllString(v)
		}
		if nk := s.redactFolded(k); nk != k {
			delete(h, k)
			h[nk] = append(h[nk], vs...)
		}
	}
}

// redactFolded replaces real values in str, ignoring ASCII case, with their
// placeholders.
func (s *Session) redactFolded(str string) string {
	if len(str) < MinValueLen {
		return str
	}
	for i, sec := range s.secrets {
		if !containsFold(str, s.folded[i]) {
			continue
		}
		fv := foldASCII(sec.value)
		for {
			at := bytes.Index(foldASCII([]byte(str)), fv)
			if at < 0 {
				break
			}
			str = str[:at] + s.placeholders[i] + str[at+len(fv):]
		}
	}
	return str
}

// RedactReader wraps a response body so real secret values are replaced by
// their placeholders, including values split across reads.
func (s *Session) RedactReader(r io.Reader) io.Reader {
	if s.Len() == 0 {
		return r
	}
	return newStream(r, s.redact, nil)
}

// Guard wraps a stream that cannot be rewritten (WebSocket frames, raw TCP):
// Read fails with ErrInResponse, before returning any byte of it, when a
// real secret value appears.
func (s *Session) Guard(r io.Reader) io.Reader {
	if s.Len() == 0 {
		return r
	}
	var lits []literal
	for i, sec := range s.secrets {
		err := fmt.Errorf("%w (secret %s)", ErrInResponse, sec.Name)
		lits = append(lits, literal{from: sec.value, secret: i, block: err})
		for _, enc := range sec.encoded() {
			lits = append(lits, literal{from: enc, secret: i, block: err})
		}
	}
	return newStream(r, newMatcher(lits), nil)
}

// InteractiveHold is how long interactive streams hold back bytes that could
// be the start of a secret before releasing them.
const InteractiveHold = 20 * time.Millisecond

// InteractiveRequest is RequestBody for a long-lived client-to-upstream
// raw TCP stream in interactive mode (tls false: raw TCP leaves the gateway
// as it came, so placeholders are substituted only for secrets with
// AllowPlaintext). Call stop when done.
func (s *Session) InteractiveRequest(host policy.Host, r io.Reader, tls bool) (rd io.Reader, stop func()) {
	if s.Len() == 0 {
		return r, func() {}
	}
	st := newStream(r, s.requestMatcher(host, Body, "stream", tls), nil).Interactive(InteractiveHold)
	return st, func() { st.Close() }
}

// InteractiveCheck is like InteractiveRequest but never substitutes: every
// placeholder, and the real value of a secret not bound to host, fails the
// stream before a byte of it is returned, and the output has exactly the
// input's length. It scans unmasked WebSocket payloads, which cannot change
// length without re-framing.
func (s *Session) InteractiveCheck(host policy.Host, r io.Reader, where string) (rd io.Reader, stop func()) {
	if s.Len() == 0 {
		return r, func() {}
	}
	st := newStream(r, s.requestMatcher(host, 0, where, true), nil).Interactive(InteractiveHold)
	return st, func() { st.Close() }
}

// InteractiveGuard is Guard in interactive mode. Call stop when done.
func (s *Session) InteractiveGuard(r io.Reader) (rd io.Reader, stop func()) {
	if s.Len() == 0 {
		return r, func() {}
	}
	st := s.Guard(r).(*Stream).Interactive(InteractiveHold)
	return st, func() { st.Close() }
}

// Scrub replaces placeholders and real values in str (a receipt field or
// log line about to be written), ignoring ASCII case, with
// "[placeholder:NAME]" and "[secret:NAME]".
func (s *Session) Scrub(str string) string {
	if s.Len() == 0 || len(str) < MinValueLen {
		return str
	}
	for i, sec := range s.secrets {
		if containsFold(str, s.placeholders[i]) {
			str = replaceFolded(str, []byte(s.placeholders[i]), "[placeholder:"+sec.Name+"]")
		}
		if containsFold(str, s.folded[i]) {
			str = replaceFolded(str, sec.value, "[secret:"+sec.Name+"]")
		}
	}
	return str
}

// replaceFolded replaces every ASCII-case-insensitive occurrence of from.
func replaceFolded(str string, from []byte, to string) string {
	ff := foldASCII(from)
	var b strings.Builder
	rest := str
	for {
		at := bytes.Index(foldASCII([]byte(rest)), ff)
		if at < 0 {
			if b.Len() == 0 {
				return str
			}
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:at])
		b.WriteString(to)
		rest = rest[at+len(ff):]
	}
}
