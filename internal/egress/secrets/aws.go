package secrets

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"vak/internal/egress/policy"
	"vak/internal/egress/sigv4"
)

// AWSPart is the part of an AWS access key a secret holds. The sandbox
// gets the placeholders of all parts in its environment (AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN when named so) and signs its
// requests with them; the gateway verifies each signature with the
// placeholder secret and signs the request again with the real key
// (Session.ResignAWS). The parts are never substituted as text: a
// placeholder found anywhere else blocks the request.
type AWSPart uint8

// Parts of an AWS access key.
const (
	AWSNone AWSPart = iota
	AWSKeyID
	AWSSecretKey
	AWSSessionToken
)

// String is the config spelling.
func (p AWSPart) String() string {
	switch p {
	case AWSKeyID:
		return "access_key_id"
	case AWSSecretKey:
		return "secret_access_key"
	case AWSSessionToken:
		return "session_token"
	}
	return ""
}

// ParseAWSPart parses the config spelling of a part.
func ParseAWSPart(s string) (AWSPart, error) {
	for _, p := range []AWSPart{AWSKeyID, AWSSecretKey, AWSSessionToken} {
		if p.String() == s {
			return p, nil
		}
	}
	return AWSNone, fmt.Errorf("%q is not a part of an AWS access key (want access_key_id, secret_access_key or session_token)", s)
}

// ErrAWSSignature wraps the refusals of requests whose AWS signature the
// gateway cannot re-sign (malformed, chunk-signed, not verifying with the
// placeholder).
var ErrAWSSignature = errors.New("secrets: AWS signature not re-signed")

// awsKey holds the indexes of the parts of the session's AWS access key
// (token -1 without one).
type awsKey struct{ id, secret, token int }

func findAWSKey(secs []*Secret) *awsKey {
	k := awsKey{-1, -1, -1}
	for i, s := range secs {
		switch s.AWS {
		case AWSKeyID:
			k.id = i
		case AWSSecretKey:
			k.secret = i
		case AWSSessionToken:
			k.token = i
		}
	}
	if k.id < 0 || k.secret < 0 {
		return nil
	}
	return &k
}

// AWSResigned is what ResignAWS did to a request.
type AWSResigned struct {
	// Used are the indexes of the secrets used (nil: not re-signed).
	Used []int
	// Service is the service of the signature's scope.
	Service string
	// Body, when set, must wrap the request body: a chunk-signed payload
	// whose chunks are re-signed as they stream.
	Body func(io.Reader) io.Reader
}

// ResignAWS re-signs r, bound for host, when it carries a SigV4 signature
// made with the placeholder access key and host is one the key is bound
// to: the signature must verify with the placeholder secret, and r gets
// the real key ID, session token and a signature made with the real
// secret (and a chunk-signed payload, its chunks re-signed). clientHost is
// the Host the client signed; payload returns the SHA-256 of the body when
// r declares no payload hash. Requests without a SigV4 signature, and ones
// to other hosts, are left to the other checks (which refuse a placeholder
// anywhere). A SigV4 request to a bound host signed with another key is a
// foreign credential unless allowForeign or the key allows them.
func (s *Session) ResignAWS(host policy.Host, clientHost string, r *http.Request, tls, allowForeign bool, payload func() (string, error)) (AWSResigned, error) {
	var res AWSResigned
	if s == nil || s.aws == nil {
		return res, nil
	}
	id := s.secrets[s.aws.id]
	a, err := sigv4.Parse(r)
	switch {
	case errors.Is(err, sigv4.ErrNotSigned), !id.boundTo(host):
		return res, nil
	case err != nil:
		return res, fmt.Errorf("%w (%s) toward %s: %w", ErrAWSSignature, id.Name, host, err)
	}
	if a.KeyID != s.placeholders[s.aws.id] {
		if allowForeign || id.AllowForeignCredentials {
			return res, nil
		}
		where := "Authorization"
		if a.Presigned {
			where = "X-Amz-Credential"
		}
		return res, &ForeignCredentialError{Secret: id.Name, Host: host.String(), Header: where}
	}
	if !tls {
		return res, &BlockedError{Secret: id.Name, Host: host.String(), Where: "signature", Plaintext: true}
	}
	hash, err := sigv4.PayloadHash(r, a)
	if err == nil && hash == "" {
		hash, err = payload()
	}
	if err != nil {
		return res, fmt.Errorf("%w (%s) toward %s: %w", ErrAWSSignature, id.Name, host, err)
	}
	from := sigv4.Credentials{KeyID: s.placeholders[s.aws.id], Secret: s.placeholders[s.aws.secret]}
	to := sigv4.Credentials{KeyID: string(id.value), Secret: string(s.secrets[s.aws.secret].value)}
	used := []int{s.aws.id, s.aws.secret}
	if s.aws.token >= 0 {
		from.Token = s.placeholders[s.aws.token]
		to.Token = string(s.secrets[s.aws.token].value)
		used = append(used, s.aws.token)
	}
	seed, err := sigv4.Resign(r, a, from, to, clientHost, hash)
	if err != nil {
		return res, fmt.Errorf("%w (%s) toward %s: %w", ErrAWSSignature, id.Name, host, err)
	}
	res = AWSResigned{Used: used, Service: a.Service}
	if hash == sigv4.StreamingSigned {
		res.Body = func(body io.Reader) io.Reader { return sigv4.ResignChunks(body, a, from, to, a.Signature, seed) }
	}
	return res, nil
}

// MintedCredentials is what a response to a re-signed request must not
// carry into the sandbox: a new secret access key (STS AssumeRole and
// GetSessionToken, IAM CreateAccessKey, IAM Identity Center's
// GetRoleCredentials). Matched ignoring ASCII case.
const MintedCredentials = "secretaccesskey"

// ErrMintedCredentials is the error of a response cut because it carried
// new AWS credentials.
var ErrMintedCredentials = errors.New("secrets: the response carries new AWS credentials (a SecretAccessKey), which vak does not let into the sandbox: mint them on the host and bind them as [secrets] instead")

// GuardMinted wraps the body of a response to a request re-signed with
// the AWS key: reading fails with ErrMintedCredentials before any byte of
// a SecretAccessKey field name is returned (and so before its value).
func GuardMinted(r io.Reader) io.Reader { return &mintGuard{r: r} }

type mintGuard struct {
	r     io.Reader
	buf   []byte // read, not yet returned
	chunk []byte // the read buffer, allocated once
	err   error
	seen  bool
}

func (g *mintGuard) Read(p []byte) (int, error) {
	keep := len(MintedCredentials) - 1
	for {
		if g.seen {
			return 0, ErrMintedCredentials
		}
		// Return what can no longer be the start of a match.
		safe := len(g.buf) - keep
		if g.err != nil {
			safe = len(g.buf)
		}
		if safe > 0 {
			n := copy(p, g.buf[:safe])
			g.buf = g.buf[n:]
			return n, nil
		}
		if g.err != nil {
			return 0, g.err
		}
		if g.chunk == nil {
			g.chunk = make([]byte, 32<<10)
		}
		n, err := g.r.Read(g.chunk)
		g.buf = append(g.buf, g.chunk[:n]...)
		g.err = err
		if containsFold(string(g.buf), MintedCredentials) {
			g.seen = true
		}
	}
}
