// Package logins keeps OAuth login tokens out of the sandbox ("phantom
// tokens"). A login provider names its token endpoints and the API hosts
// its access tokens are for. When a token endpoint's response passes the
// gateway on its way into the sandbox, Rewrite replaces its access_token,
// refresh_token and id_token with phantoms of the same shape (a JWT stays
// a JWT with its header and claims and an unusable signature; an opaque
// token keeps its prefix and length) and returns the real values, which
// the gateway keeps on the host (Store) and turns into secrets bound to the
// provider's hosts: an access or id token's phantom becomes the real token
// only in requests to the API hosts, a refresh token's only in request
// bodies to the token endpoints, where the next response is rewritten
// again. A login done inside the sandbox therefore leaves only phantoms
// there; a phantom sent anywhere else is refused like any placeholder.
//
// Every new real token gets a new phantom: the client stores what the
// response gave it, so its home file stays consistent by construction, and
// earlier phantoms keep working until the store drops them (KeepPerField).
//
// Nothing in this package formats a token into an error.
package logins

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"vak/internal/egress/policy"
)

// Fields are the response fields that carry tokens.
var Fields = []string{"access_token", "refresh_token", "id_token"}

// Endpoint is a token endpoint: a host name and a path, matched exactly
// (the path after cleaning, without a trailing slash, ignoring case).
type Endpoint struct {
	Host string
	Path string
}

// String is the endpoint as a URL.
func (e Endpoint) String() string { return "https://" + e.Host + e.Path }

// Provider is a validated login provider.
type Provider struct {
	// Name is the config name (logins.NAME); it names the tokens' secrets.
	Name string
	// Builtin is the built-in provider it is (Builtins), or "".
	Builtin string
	// Endpoints are the token endpoints whose responses are rewritten and
	// where refresh tokens' phantoms are substituted (request bodies).
	Endpoints []Endpoint
	// APIHosts are where access and id tokens' phantoms are substituted
	// (request headers, Basic credentials included).
	APIHosts []policy.HostPattern
}

// Builtin describes a built-in provider.
type Builtin struct {
	// Client is who uses it, for docs and help.
	Client    string
	Endpoints []Endpoint
	APIHosts  []string
}

// Builtins are the providers a [logins.NAME] section can name with
// provider = "...". Their token endpoints are the ones the clients use
// (Claude Code moved between several hosts; every one is listed).
var Builtins = map[string]Builtin{
	"anthropic": {
		Client: "Claude Code (Claude Pro/Max login)",
		Endpoints: []Endpoint{
			{"platform.claude.com", "/v1/oauth/token"},
			{"console.anthropic.com", "/v1/oauth/token"},
			{"claude.ai", "/v1/oauth/token"},
			{"api.anthropic.com", "/v1/oauth/token"},
		},
		APIHosts: []string{"api.anthropic.com"},
	},
	"openai": {
		Client:    "Codex (Sign in with ChatGPT)",
		Endpoints: []Endpoint{{"auth.openai.com", "/oauth/token"}},
		APIHosts:  []string{"chatgpt.com", "api.openai.com"},
	},
	"github": {
		Client:    "gh and git (GitHub OAuth and device flow)",
		Endpoints: []Endpoint{{"github.com", "/login/oauth/access_token"}},
		APIHosts:  []string{"api.github.com", "github.com", "uploads.github.com"},
	},
}

// BuiltinNames are the built-in providers' names, sorted.
func BuiltinNames() []string {
	var n []string
	for k := range Builtins {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// ParseEndpoint parses a token URL: https, a host name (no IP literal, no
// port, no user information, query or fragment) and a path.
func ParseEndpoint(s string) (Endpoint, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%q is not a URL", s)
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Port() != "" {
		return Endpoint{}, fmt.Errorf("%q: a token URL is https://HOST/PATH, without port, user, query or fragment", s)
	}
	if _, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil {
		return Endpoint{}, fmt.Errorf("%q: the token URL's host must be a DNS name, not an address", s)
	}
	h, err := policy.ParseHostPattern(u.Hostname())
	if err != nil || h.IsAny() || strings.Contains(h.String(), "*") {
		return Endpoint{}, fmt.Errorf("%q: the token URL's host must be one DNS name", s)
	}
	p := cleanPath(u.Path)
	if p == "/" {
		return Endpoint{}, fmt.Errorf("%q: the token URL needs a path", s)
	}
	return Endpoint{Host: strings.ToLower(u.Hostname()), Path: p}, nil
}

// cleanPath is p cleaned, lower-cased, without a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	return strings.ToLower(path.Clean("/" + p))
}

// Match reports whether a request to host and urlPath is one of the
// provider's token endpoints. The path matches after cleaning, ignoring
// case and a trailing slash, so "//v1/oauth/TOKEN/" cannot carry a real
// token past the rewrite.
func (p *Provider) Match(host policy.Host, urlPath string) bool {
	if host.IsIP() {
		return false
	}
	cp := cleanPath(urlPath)
	for _, e := range p.Endpoints {
		if e.Host == host.Name && e.Path == cp {
			return true
		}
	}
	return false
}

// TokenHosts are the endpoints' hosts as patterns.
func (p *Provider) TokenHosts() []policy.HostPattern {
	var out []policy.HostPattern
	seen := map[string]bool{}
	for _, e := range p.Endpoints {
		if !seen[e.Host] {
			seen[e.Host] = true
			out = append(out, policy.MustHostPattern(e.Host))
		}
	}
	return out
}

// Errors.
var (
	// ErrUnrewritable means a token response could not be rewritten so
	// that no real token is left in it; the gateway refuses the response.
	ErrUnrewritable = errors.New("logins: token response cannot be rewritten")
)

// MaxResponse bounds a token response the gateway rewrites.
const MaxResponse = 1 << 20

// MinTokenLen is the shortest token value rewritten; a shorter one is
// refused (it could not be told apart from unrelated bytes).
const MinTokenLen = 8

// Token is a real token and its phantom.
type Token struct {
	// Login is the provider's config name; Field the response field.
	Login string `json:"login"`
	Field string `json:"field"`
	// Phantom is what the sandbox got; Real what the provider issued.
	Phantom string `json:"phantom"`
	Real    string `json:"real"`
	// Added is when the store got the token (Store.Add sets it); merging
	// stores orders tokens by it. Zero in files written before it existed.
	Added time.Time `json:"added,omitzero"`
}

// Rewrite replaces the tokens in a token endpoint's response body (JSON
// object or form-encoded, per contentType or, without one, its first byte)
// with phantoms, and returns the new body and the tokens it replaced. A
// body without tokens is returned unchanged. A body it cannot make free of
// every real token it found (the value repeated elsewhere, a token that is
// too short) is ErrUnrewritable. known, when not nil, returns the phantom
// already given for a real token (a refresh that did not rotate it keeps
// its phantom), or "".
func Rewrite(login string, body []byte, contentType string, known func(field, real string) string) ([]byte, []Token, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	r := rewriter{login: login, known: known}
	switch {
	case strings.Contains(mt, "json") || (mt != "application/x-www-form-urlencoded" && len(trimmed) > 0 && trimmed[0] == '{'):
		return r.json(body)
	case mt == "application/x-www-form-urlencoded" || (mt == "" || mt == "text/plain") && bytes.Contains(body, []byte("_token=")):
		return r.form(body)
	}
	return body, nil, nil
}

type rewriter struct {
	login string
	known func(field, real string) string
}

// mint makes the phantom of a real token (or reuses the known one).
func (r rewriter) mint(field, real string) (Token, error) {
	if len(real) < MinTokenLen || strings.ContainsFunc(real, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
		return Token{}, fmt.Errorf("%w: the %s is shorter than %d bytes or holds spaces or control characters", ErrUnrewritable, field, MinTokenLen)
	}
	ph := ""
	if r.known != nil {
		ph = r.known(field, real)
	}
	if ph == "" {
		ph = Phantom(real)
	}
	return Token{Login: r.login, Field: field, Phantom: ph, Real: real}, nil
}

// fieldKeys are the token fields of a token response, by JSON key.
var fieldKeys = map[string]string{"access_token": "access_token", "refresh_token": "refresh_token", "id_token": "id_token"}

// phantomise replaces the non-empty string values of obj under keys (JSON
// key -> token field), in key order, with phantoms and returns the tokens.
func (r rewriter) phantomise(obj map[string]json.RawMessage, keys map[string]string) ([]Token, error) {
	var toks []Token
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		raw, ok := obj[k]
		if !ok {
			continue
		}
		var v string
		if json.Unmarshal(raw, &v) != nil || v == "" {
			continue
		}
		t, err := r.mint(keys[k], v)
		if err != nil {
			return nil, err
		}
		obj[k], _ = json.Marshal(t.Phantom)
		toks = append(toks, t)
	}
	return toks, nil
}

func (r rewriter) json(body []byte) ([]byte, []Token, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		// Not an object: no token fields to rewrite.
		return body, nil, nil
	}
	toks, err := r.phantomise(obj, fieldKeys)
	if err != nil {
		return nil, nil, err
	}
	if len(toks) == 0 {
		return body, nil, nil
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrUnrewritable, err)
	}
	if err := checkJSON(out, toks); err != nil {
		return nil, nil, err
	}
	return out, toks, nil
}

// checkJSON refuses out when any string in it (key or value, at any depth,
// after JSON unescaping) still holds a real token.
func checkJSON(out []byte, toks []Token) error {
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		return fmt.Errorf("%w: %v", ErrUnrewritable, err)
	}
	var walk func(any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case string:
			return holds(x, toks)
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		case map[string]any:
			for k, e := range x {
				if err := holds(k, toks); err != nil {
					return err
				}
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(v)
}

// holds is ErrUnrewritable when s contains a real token.
func holds(s string, toks []Token) error {
	for _, t := range toks {
		if strings.Contains(s, t.Real) {
			return fmt.Errorf("%w: the %s value appears in another field too", ErrUnrewritable, t.Field)
		}
	}
	return nil
}

func (r rewriter) form(body []byte) ([]byte, []Token, error) {
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the form-encoded body does not parse", ErrUnrewritable)
	}
	var toks []Token
	for _, f := range Fields {
		vs := q[f]
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 {
			// Clients differ on which of two values they take.
			return nil, nil, fmt.Errorf("%w: %s appears %d times", ErrUnrewritable, f, len(vs))
		}
		if vs[0] == "" {
			continue
		}
		t, err := r.mint(f, vs[0])
		if err != nil {
			return nil, nil, err
		}
		q.Set(f, t.Phantom)
		toks = append(toks, t)
	}
	if len(toks) == 0 {
		return body, nil, nil
	}
	for k, vs := range q {
		if err := holds(k, toks); err != nil {
			return nil, nil, err
		}
		for _, v := range vs {
			if err := holds(v, toks); err != nil {
				return nil, nil, err
			}
		}
	}
	return []byte(q.Encode()), toks, nil
}

const (
	alnum  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	hexLow = "0123456789abcdef"
	// minRandom is the fewest random characters in a phantom (>= 119
	// bits in the alphanumeric alphabet).
	minRandom = 20
)

// Phantom returns a phantom of real's shape. A JWT (three base64url
// segments whose first decodes to a JSON object) keeps its header and
// claims, which clients read (expiry, account), and gets a random
// signature of the same length; another token keeps a prefix ending in
// '-' or '_' ("sk-ant-oat01-", "gho_") and gets random characters in the
// rest's alphabet and length (at least minRandom of them); typePrefix
// says which prefix.
func Phantom(real string) string {
	if parts := strings.Split(real, "."); len(parts) == 3 && isJWTHeader(parts[0]) && isB64URL(parts[1]) && isB64URL(parts[2]) {
		n := max(len(parts[2]), 43)
		return parts[0] + "." + parts[1] + "." + randomString(b64Alphabet, n)
	}
	cut := typePrefix(real)
	prefix, rest := real[:cut], real[cut:]
	alpha := alnum
	if strings.Trim(rest, hexLow) == "" {
		alpha = hexLow
	}
	return prefix + randomString(alpha, max(len(rest), minRandom))
}

// typePrefix is the length of real's type prefix: up to four leading
// segments of at most five lower-case letters or digits, each ending in
// '-' or '_' ("sk-ant-oat01-", "gho_"), leaving at least minRandom
// characters. Random characters never make it further than a short
// segment, so a phantom shows at most a few of the real token's.
func typePrefix(real string) int {
	cut, seg := 0, 0
	for i := 0; i < len(real) && seg < 4; i++ {
		c := real[i]
		switch {
		case c == '-' || c == '_':
			if i == cut || i-cut > 5 || len(real)-(i+1) < minRandom {
				return cut
			}
			cut, seg = i+1, seg+1
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
		default:
			return cut
		}
	}
	return cut
}

const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func isB64URL(s string) bool {
	return s != "" && strings.Trim(s, b64Alphabet) == ""
}

func isJWTHeader(s string) bool {
	if !isB64URL(s) {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return false
	}
	var m map[string]any
	return json.Unmarshal(b, &m) == nil && m["alg"] != nil
}

// randomString is n characters of alphabet (its length a power of two or
// not: rejection sampling keeps them uniform).
func randomString(alphabet string, n int) string {
	out := make([]byte, 0, n)
	limit := 256 - 256%len(alphabet)
	var buf [64]byte
	for len(out) < n {
		if _, err := rand.Read(buf[:]); err != nil {
			panic("logins: crypto/rand failed: " + err.Error())
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}
