// Package sigv4 re-signs AWS Signature Version 4 requests: the gateway
// verifies that a request was signed with the placeholder secret the
// sandbox holds and signs the same canonical request again with the real
// credentials, so that the real secret access key never enters the
// sandbox (it is never sent on the wire at all: only signatures are).
//
// Both forms of SigV4 are handled: the Authorization header and presigned
// URLs (X-Amz-* query parameters). The payload hash is the one the client
// declared in X-Amz-Content-Sha256 (S3: a hex digest, UNSIGNED-PAYLOAD or
// STREAMING-UNSIGNED-PAYLOAD-TRAILER) or, without that header, the SHA-256
// of the body, which the caller supplies. A payload signed chunk by chunk
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) is re-signed chunk by chunk as it
// streams (ResignChunks); its variants with signed trailers or ECDSA keys
// are refused with ErrUnsupported.
//
// The canonical path differs between services (S3 signs the path as sent;
// the others normalise it and encode it once more). A re-signer does not
// need to know the service: the variant under which the client's
// signature verifies is the one signed again.
//
// Nothing here formats a secret or a signature into an error.
package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Algorithm is the only signing algorithm handled.
const Algorithm = "AWS4-HMAC-SHA256"

// Payload hashes with a meaning of their own.
const (
	UnsignedPayload        = "UNSIGNED-PAYLOAD"
	StreamingUnsignedTrail = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	// StreamingSigned is a payload in aws-chunked encoding whose every
	// chunk is signed, chained from the request's signature.
	StreamingSigned = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	// EmptySHA256 is the hex SHA-256 of no bytes.
	EmptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// Errors. Each is wrapped with a description of what is at fault.
var (
	// ErrNotSigned: the request carries no SigV4 signature.
	ErrNotSigned = errors.New("sigv4: request is not signed with AWS Signature Version 4")
	// ErrMalformed: the signature's fields cannot be parsed.
	ErrMalformed = errors.New("sigv4: malformed signature")
	// ErrUnsupported: a form of SigV4 that cannot be re-signed.
	ErrUnsupported = errors.New("sigv4: cannot re-sign this request")
	// ErrMismatch: the signature does not verify with the expected secret.
	ErrMismatch = errors.New("sigv4: signature does not verify")
)

// Credentials are an access key: its ID, secret, and session token (empty
// for long-term keys).
type Credentials struct {
	KeyID, Secret, Token string
}

// Auth is a request's parsed signature.
type Auth struct {
	KeyID   string
	Date    string // yyyymmdd of the credential scope
	Region  string
	Service string
	// SignedHeaders are lower-case, in the order given (sorted when valid).
	SignedHeaders []string
	Signature     string
	// AmzDate is the request time, yyyymmddThhmmssZ.
	AmzDate string
	// Presigned is set for query-string authentication.
	Presigned bool
}

// Scope is the credential scope: date/region/service/aws4_request.
func (a *Auth) Scope() string {
	return a.Date + "/" + a.Region + "/" + a.Service + "/aws4_request"
}

// Parse reads the SigV4 signature of r, from its Authorization header or
// its query. A request with both, or with the header twice, is malformed:
// what the gateway verifies must be what the upstream checks.
func Parse(r *http.Request) (*Auth, error) {
	hv := r.Header.Values("Authorization")
	q, qerr := url.ParseQuery(r.URL.RawQuery)
	inQuery := qerr == nil && q.Has("X-Amz-Algorithm")
	if !inQuery && strings.Contains(strings.ToLower(r.URL.RawQuery), "x-amz-algorithm") {
		return nil, fmt.Errorf("%w: the query's X-Amz-Algorithm cannot be read", ErrMalformed)
	}
	var header string
	for _, v := range hv {
		if strings.HasPrefix(strings.TrimSpace(v), "AWS4-") {
			header = v
		}
	}
	switch {
	case header == "" && !inQuery:
		return nil, ErrNotSigned
	case header != "" && inQuery, len(hv) > 1:
		return nil, fmt.Errorf("%w: more than one signature", ErrMalformed)
	case inQuery:
		return parseQuery(q)
	}
	return parseHeader(header, r.Header)
}

func parseHeader(v string, h http.Header) (*Auth, error) {
	alg, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
	if alg != Algorithm {
		return nil, fmt.Errorf("%w: algorithm %q (only %s can be re-signed)", ErrUnsupported, alg, Algorithm)
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok {
			return nil, fmt.Errorf("%w: Authorization field %q", ErrMalformed, k)
		}
		if _, dup := fields[k]; dup {
			return nil, fmt.Errorf("%w: Authorization field %s twice", ErrMalformed, k)
		}
		fields[k] = val
	}
	if len(h.Values("X-Amz-Date")) != 1 {
		return nil, fmt.Errorf("%w: want exactly one X-Amz-Date header", ErrUnsupported)
	}
	return newAuth(fields["Credential"], fields["SignedHeaders"], fields["Signature"], h.Get("X-Amz-Date"), false)
}

func parseQuery(q url.Values) (*Auth, error) {
	for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Date"} {
		if len(q[k]) != 1 {
			return nil, fmt.Errorf("%w: want exactly one query parameter %s", ErrMalformed, k)
		}
	}
	if alg := q.Get("X-Amz-Algorithm"); alg != Algorithm {
		return nil, fmt.Errorf("%w: algorithm %q (only %s can be re-signed)", ErrUnsupported, alg, Algorithm)
	}
	return newAuth(q.Get("X-Amz-Credential"), q.Get("X-Amz-SignedHeaders"), q.Get("X-Amz-Signature"), q.Get("X-Amz-Date"), true)
}

func newAuth(cred, signed, sig, amzDate string, presigned bool) (*Auth, error) {
	parts := strings.Split(cred, "/")
	if len(parts) != 5 || parts[4] != "aws4_request" || parts[0] == "" {
		return nil, fmt.Errorf("%w: Credential is not KEY/date/region/service/aws4_request", ErrMalformed)
	}
	a := &Auth{KeyID: parts[0], Date: parts[1], Region: parts[2], Service: parts[3], Signature: sig, AmzDate: amzDate, Presigned: presigned}
	if len(a.Date) != 8 || !digits(a.Date) || a.Region == "" || a.Service == "" {
		return nil, fmt.Errorf("%w: credential scope %q", ErrMalformed, a.Scope())
	}
	if len(amzDate) != 16 || !strings.HasPrefix(amzDate, a.Date) || amzDate[8] != 'T' || amzDate[15] != 'Z' {
		return nil, fmt.Errorf("%w: X-Amz-Date %q does not match the scope's date", ErrMalformed, amzDate)
	}
	if len(sig) != 64 || !isHex(sig) {
		return nil, fmt.Errorf("%w: Signature is not 64 hex digits", ErrMalformed)
	}
	if signed == "" {
		return nil, fmt.Errorf("%w: no SignedHeaders", ErrMalformed)
	}
	a.SignedHeaders = strings.Split(signed, ";")
	for i, h := range a.SignedHeaders {
		if h == "" || h != strings.ToLower(h) || (i > 0 && a.SignedHeaders[i-1] >= h) {
			return nil, fmt.Errorf("%w: SignedHeaders %q are not sorted lower-case names", ErrMalformed, signed)
		}
	}
	if !slices.Contains(a.SignedHeaders, "host") {
		return nil, fmt.Errorf("%w: host is not a signed header", ErrMalformed)
	}
	return a, nil
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// PayloadHash is the hash r's signature covers, from X-Amz-Content-Sha256,
// or "" when the caller has to hash the body (no such header, not
// presigned). Chunk-signed payloads are ErrUnsupported.
func PayloadHash(r *http.Request, a *Auth) (string, error) {
	vs := r.Header.Values("X-Amz-Content-Sha256")
	switch {
	case len(vs) > 1:
		return "", fmt.Errorf("%w: X-Amz-Content-Sha256 twice", ErrMalformed)
	case len(vs) == 1:
		v := vs[0]
		switch {
		case v == UnsignedPayload, v == StreamingUnsignedTrail, v == StreamingSigned, len(v) == 64 && isHex(v):
			return v, nil
		case strings.HasPrefix(v, "STREAMING-"):
			return "", fmt.Errorf("%w: X-Amz-Content-Sha256 %s (signed trailers or ECDSA chunk signatures are not re-signed); configure the client for unsigned payloads over HTTPS (the AWS CLI and botocore do this by default)", ErrUnsupported, v)
		}
		return "", fmt.Errorf("%w: X-Amz-Content-Sha256 is neither a hex SHA-256 nor UNSIGNED-PAYLOAD", ErrMalformed)
	case a.Presigned:
		// Presigned URLs sign no payload (S3, the only service that
		// accepts them for data, documents UNSIGNED-PAYLOAD).
		return UnsignedPayload, nil
	}
	return "", nil
}

// canonical is the canonical request of r under a's signed headers, the
// given host value and payload hash; double selects the non-S3 path
// encoding (normalised, then encoded once more).
func canonical(r *http.Request, a *Auth, host, payload string, double bool) (string, error) {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte('\n')
	p := r.URL.EscapedPath()
	if p == "" {
		p = "/"
	}
	if double {
		clean := path.Clean(p)
		if strings.HasSuffix(p, "/") && clean != "/" {
			clean += "/"
		}
		p = uriEncode(clean, false)
	}
	b.WriteString(p)
	b.WriteByte('\n')
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", fmt.Errorf("%w: query: %v", ErrMalformed, err)
	}
	b.WriteString(canonicalQuery(q, a.Presigned))
	b.WriteByte('\n')
	for _, name := range a.SignedHeaders {
		b.WriteString(name)
		b.WriteByte(':')
		switch name {
		case "host":
			b.WriteString(host)
		case "content-length":
			v := r.Header.Get("Content-Length")
			if v == "" {
				v = strconv.FormatInt(max(r.ContentLength, 0), 10)
			}
			b.WriteString(v)
		default:
			vs := r.Header.Values(name)
			if len(vs) == 0 {
				return "", fmt.Errorf("%w: signed header %s is not in the request", ErrMalformed, name)
			}
			for i, v := range vs {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strings.Join(strings.Fields(v), " "))
			}
		}
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(strings.Join(a.SignedHeaders, ";"))
	b.WriteByte('\n')
	b.WriteString(payload)
	return b.String(), nil
}

// canonicalQuery encodes every parameter (the signature's own left out of
// a presigned URL), sorted by name and value.
func canonicalQuery(q url.Values, presigned bool) string {
	var pairs []string
	for k, vs := range q {
		if presigned && k == "X-Amz-Signature" {
			continue
		}
		for _, v := range vs {
			pairs = append(pairs, uriEncode(k, true)+"="+uriEncode(v, true))
		}
	}
	slices.Sort(pairs)
	return strings.Join(pairs, "&")
}

// uriEncode is SigV4's encoding: every byte but the unreserved characters
// percent-encoded in upper-case hex; '/' kept unless slash is set.
func uriEncode(s string, slash bool) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && !slash:
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexd[c>>4])
			b.WriteByte(hexd[c&15])
		}
	}
	return b.String()
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// signature is the hex signature of the canonical request cr under a's
// scope and time with the secret access key.
func signature(secret string, a *Auth, cr string) string {
	sum := sha256.Sum256([]byte(cr))
	sts := Algorithm + "\n" + a.AmzDate + "\n" + a.Scope() + "\n" + hex.EncodeToString(sum[:])
	return hex.EncodeToString(hmacSHA256(signingKey(secret, a), sts))
}

// signingKey is the key derived from the secret for a's scope.
func signingKey(secret string, a *Auth) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), a.Date)
	k = hmacSHA256(k, a.Region)
	k = hmacSHA256(k, a.Service)
	return hmacSHA256(k, "aws4_request")
}

// Verify reports whether a's signature of r verifies with secret, and
// under which path encoding (double: the non-S3 one). host is the Host
// value the client sent; payload the hash the signature covers.
func Verify(r *http.Request, a *Auth, secret, host, payload string) (double bool, err error) {
	for _, double := range []bool{false, true} {
		cr, err := canonical(r, a, host, payload, double)
		if err != nil {
			return false, err
		}
		if hmac.Equal([]byte(signature(secret, a, cr)), []byte(a.Signature)) {
			return double, nil
		}
	}
	return false, ErrMismatch
}

// Resign verifies r's signature a with from's secret and signs r again
// with to: the key ID, the session token (header or query parameter,
// added to the signed parts when to has one, removed when it has none)
// and the signature are replaced; the signed parts are otherwise the same.
// clientHost is the Host the client signed; r.URL.Host is the one sent.
//
// It returns the new signature (the seed of a chunk-signed payload's
// chain: ResignChunks).
func Resign(r *http.Request, a *Auth, from, to Credentials, clientHost, payload string) (string, error) {
	if a.KeyID != from.KeyID {
		return "", fmt.Errorf("%w: the request is signed with another access key", ErrMismatch)
	}
	double, err := Verify(r, a, from.Secret, clientHost, payload)
	if err != nil {
		return "", err
	}
	b := *a
	b.KeyID = to.KeyID
	b.SignedHeaders = slices.Clone(a.SignedHeaders)
	if a.Presigned {
		q, _ := url.ParseQuery(r.URL.RawQuery)
		q.Set("X-Amz-Credential", b.KeyID+"/"+b.Scope())
		q.Del("X-Amz-Security-Token")
		if to.Token != "" {
			q.Set("X-Amz-Security-Token", to.Token)
		}
		q.Del("X-Amz-Signature")
		r.URL.RawQuery = canonicalQuery(q, true)
	} else {
		r.Header.Del("X-Amz-Security-Token")
		i := slices.Index(b.SignedHeaders, "x-amz-security-token")
		if i >= 0 {
			b.SignedHeaders = slices.Delete(b.SignedHeaders, i, i+1)
		}
		if to.Token != "" {
			r.Header.Set("X-Amz-Security-Token", to.Token)
			b.SignedHeaders = append(b.SignedHeaders, "x-amz-security-token")
			slices.Sort(b.SignedHeaders)
		}
	}
	cr, err := canonical(r, &b, r.URL.Host, payload, double)
	if err != nil {
		return "", err
	}
	sig := signature(to.Secret, &b, cr)
	if a.Presigned {
		r.URL.RawQuery += "&X-Amz-Signature=" + sig
		return sig, nil
	}
	r.Header.Set("Authorization", fmt.Sprintf("%s Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		Algorithm, b.KeyID, b.Scope(), strings.Join(b.SignedHeaders, ";"), sig))
	return sig, nil
}

// Sign signs r with c (header form) for tests and tools: the scope from
// region and service, the time amzDate, the headers named (host always).
func Sign(r *http.Request, c Credentials, region, service, amzDate, payload string, headers ...string) error {
	r.Header.Set("X-Amz-Date", amzDate)
	if c.Token != "" {
		r.Header.Set("X-Amz-Security-Token", c.Token)
		headers = append(headers, "x-amz-security-token")
	}
	signed := append([]string{"host", "x-amz-date"}, headers...)
	for i := range signed {
		signed[i] = strings.ToLower(signed[i])
	}
	slices.Sort(signed)
	signed = slices.Compact(signed)
	a := &Auth{KeyID: c.KeyID, Date: amzDate[:8], Region: region, Service: service, SignedHeaders: signed, AmzDate: amzDate}
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	cr, err := canonical(r, a, host, payload, service != "s3")
	if err != nil {
		return err
	}
	r.Header.Set("Authorization", fmt.Sprintf("%s Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		Algorithm, c.KeyID, a.Scope(), strings.Join(signed, ";"), signature(c.Secret, a, cr)))
	return nil
}

// Presign makes r a presigned URL of c (what `aws s3 presign` does): the
// X-Amz-* query parameters and the signature, host the only signed header,
// the payload unsigned.
func Presign(r *http.Request, c Credentials, region, service, amzDate string, expires int) error {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return fmt.Errorf("%w: query: %v", ErrMalformed, err)
	}
	a := &Auth{KeyID: c.KeyID, Date: amzDate[:8], Region: region, Service: service, SignedHeaders: []string{"host"}, AmzDate: amzDate, Presigned: true}
	q.Set("X-Amz-Algorithm", Algorithm)
	q.Set("X-Amz-Credential", c.KeyID+"/"+a.Scope())
	q.Set("X-Amz-Date", amzDate)
	q.Set("X-Amz-Expires", strconv.Itoa(expires))
	q.Set("X-Amz-SignedHeaders", "host")
	if c.Token != "" {
		q.Set("X-Amz-Security-Token", c.Token)
	}
	r.URL.RawQuery = canonicalQuery(q, true)
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	cr, err := canonical(r, a, host, UnsignedPayload, false)
	if err != nil {
		return err
	}
	r.URL.RawQuery += "&X-Amz-Signature=" + signature(c.Secret, a, cr)
	return nil
}
