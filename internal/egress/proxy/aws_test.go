package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"vak/internal/egress/secrets"
	"vak/internal/egress/sigv4"
	"vak/internal/receipts"
)

const (
	awsRealID     = "AKIAREALKEY000000001"
	awsRealSecret = "real/Secret+Access0123456789abcdefghijk"
	awsRealToken  = "REALSESSIONTOKEN0123456789"
)

// awsHarness is the harness with an AWS access key (ID, secret, session
// token) bound to allowed.test, and the placeholders the sandbox has.
func awsHarness(t *testing.T) (*harness, sigv4.Credentials) {
	h := newHarness(t)
	part := func(name, value string, p secrets.AWSPart) *secrets.Secret {
		s := secrets.NewForTest(name, value, 0, "allowed.test")
		s.AWS = p
		return s
	}
	sess := secrets.NewSession([]*secrets.Secret{
		part("AWS_ACCESS_KEY_ID", awsRealID, secrets.AWSKeyID),
		part("AWS_SECRET_ACCESS_KEY", awsRealSecret, secrets.AWSSecretKey),
		part("AWS_SESSION_TOKEN", awsRealToken, secrets.AWSSessionToken),
	}, nil)
	h.sess.Store(sess)
	env := sess.Env()
	return h, sigv4.Credentials{KeyID: env["AWS_ACCESS_KEY_ID"], Secret: env["AWS_SECRET_ACCESS_KEY"], Token: env["AWS_SESSION_TOKEN"]}
}

// verifiesUpstream reports whether what the upstream received is signed
// with the real key and nothing of the placeholders reached it.
func verifiesUpstream(t *testing.T, s seenReq, payload string) error {
	r := &http.Request{Method: s.method, URL: &url.URL{Path: s.path, RawQuery: s.query}, Header: s.header, Host: s.host}
	a, err := sigv4.Parse(r)
	if err != nil {
		return err
	}
	if a.KeyID != awsRealID {
		return fmt.Errorf("upstream got key %q", a.KeyID)
	}
	tok := s.header.Get("X-Amz-Security-Token")
	if a.Presigned {
		tok = r.URL.Query().Get("X-Amz-Security-Token")
	}
	if tok != awsRealToken {
		return fmt.Errorf("upstream got session token %q", tok)
	}
	if _, err := sigv4.Verify(r, a, awsRealSecret, s.host, payload); err != nil {
		return err
	}
	if strings.Contains(fmt.Sprint(s), secrets.PlaceholderPrefix) {
		return fmt.Errorf("a placeholder reached the upstream: %v", s)
	}
	return nil
}

// TestAWSResign: requests the sandbox signs with its placeholder key are
// signed again with the real key toward the bound host (header form with
// a declared payload hash, a body the gateway hashes, a presigned URL);
// every way around it is refused before the upstream sees anything.
func TestAWSResign(t *testing.T) {
	const amzDate = "20261204T010203Z"
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		body    string
		host    string
		scheme  string
		prep    func(t *testing.T, r *http.Request, ph sigv4.Credentials)
		status  int
		payload string // the hash the upstream verifies with
		reason  string
		// chunked sends a chunk-signed body (forge: one chunk signed
		// with another key).
		chunked, forge bool
	}{
		{name: "s3 get, unsigned payload", method: "GET", path: "/bucket/key", payload: sigv4.UnsignedPayload, status: 200,
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				r.Header.Set("X-Amz-Content-Sha256", sigv4.UnsignedPayload)
				mustSign(t, r, ph, "s3", amzDate, sigv4.UnsignedPayload, "x-amz-content-sha256")
			}},
		{name: "sts post, body hashed by the gateway", method: "POST", path: "/", body: "Action=GetCallerIdentity&Version=2011-06-15", status: 200,
			payload: sha("Action=GetCallerIdentity&Version=2011-06-15"),
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
				mustSign(t, r, ph, "sts", amzDate, sha("Action=GetCallerIdentity&Version=2011-06-15"), "content-type")
			}},
		{name: "presigned get", method: "GET", path: "/bucket/key", payload: sigv4.UnsignedPayload, status: 200,
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				presignForTest(t, r, ph, amzDate)
			}},
		{name: "tampered after signing", method: "GET", path: "/bucket/key", status: 403, reason: "does not verify",
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				r.Header.Set("X-Amz-Content-Sha256", sigv4.UnsignedPayload)
				mustSign(t, r, ph, "s3", amzDate, sigv4.UnsignedPayload, "x-amz-content-sha256")
				r.URL.Path = "/bucket/other"
			}},
		{name: "body changed after signing", method: "POST", path: "/", body: "Action=AssumeRole", status: 403, reason: "does not verify",
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				mustSign(t, r, ph, "sts", amzDate, sha("Action=GetCallerIdentity"))
			}},
		{name: "signed with the placeholder key ID but another secret", method: "GET", path: "/k", status: 403, reason: "does not verify",
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				ph.Secret = "guessed-secret-0123456789"
				mustSign(t, r, ph, "s3", amzDate, sigv4.EmptySHA256)
			}},
		{name: "a foreign key", method: "GET", path: "/k", status: 403, reason: "not the placeholder of secret AWS_ACCESS_KEY_ID",
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				mustSign(t, r, sigv4.Credentials{KeyID: "AKIAATTACKER", Secret: "attacker-secret-123"}, "s3", amzDate, sigv4.EmptySHA256)
			}},
		{name: "chunk-signed upload", method: "POST", path: "/bucket/key", chunked: true, status: 200, payload: sigv4.StreamingSigned},
		{name: "chunk-signed upload, a chunk forged", method: "POST", path: "/bucket/key", chunked: true, forge: true, status: 403, reason: "AWS chunk-signed payload: sigv4: signature does not verify"},
		{name: "chunk-signed upload with signed trailers", method: "POST", path: "/bucket/key", body: "x", status: 501, reason: "signed trailers",
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				r.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")
				mustSign(t, r, ph, "s3", amzDate, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", "x-amz-content-sha256")
			}},
		{name: "the placeholder secret itself in a header", method: "GET", path: "/k", status: 403, reason: "placeholder of secret AWS_SECRET_ACCESS_KEY",
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				r.Header.Set("X-Leak", ph.Secret)
			}},
		{name: "signed toward a host the key is not bound to", method: "GET", path: "/k", host: "other.test", status: 403, reason: "placeholder of secret AWS_",
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				mustSign(t, r, ph, "s3", amzDate, sigv4.EmptySHA256)
			}},
		{name: "over plain http", method: "GET", path: "/k", scheme: "http", status: 403, reason: "unencrypted",
			prep: func(t *testing.T, r *http.Request, ph sigv4.Credentials) {
				mustSign(t, r, ph, "s3", amzDate, sigv4.EmptySHA256)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ph := awsHarness(t)
			host, scheme := "allowed.test", "https"
			if tc.host != "" {
				host = tc.host
			}
			if tc.scheme != "" {
				scheme = tc.scheme
			}
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			r, err := http.NewRequest(tc.method, h.url(scheme, host, tc.path), body)
			if err != nil {
				t.Fatal(err)
			}
			var chunkData []byte
			if tc.chunked {
				r, chunkData = chunkedRequest(t, h.url(scheme, host, tc.path), ph, amzDate, tc.forge)
			} else {
				tc.prep(t, r, ph)
			}
			resp, err := h.client(false).Do(r)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, out)
			}
			if strings.Contains(string(out), awsRealSecret) || strings.Contains(string(out), awsRealID) || strings.Contains(string(out), awsRealToken) {
				t.Fatalf("a real value reached the client: %s", out)
			}
			if tc.status != 200 {
				// A forged chunk: the upstream may have seen the request
				// start, never a complete body.
				if len(h.seen.all()) != 0 && !tc.forge {
					t.Fatalf("the upstream saw a refused request: %+v", h.seen.all())
				}
				h.receipt(func(r receipts.Record) bool {
					return r.Decision == receipts.Deny && strings.Contains(r.Reason, tc.reason)
				})
				return
			}
			s := h.seen.last(t)
			if err := verifiesUpstream(t, s, tc.payload); err != nil {
				t.Fatal(err)
			}
			if tc.chunked {
				// The chunks the upstream got verify with the real key
				// (re-signing them with it as both keys checks them).
				a, _ := sigv4.Parse(&http.Request{Method: s.method, URL: &url.URL{Path: s.path}, Header: s.header, Host: s.host})
				real := sigv4.Credentials{Secret: awsRealSecret}
				got, err := io.ReadAll(sigv4.ResignChunks(strings.NewReader(s.body), a, real, real, a.Signature, a.Signature))
				if err != nil || !bytes.Contains(got, chunkData[:100]) {
					t.Fatalf("upstream chunks: %v", err)
				}
			} else if s.body != tc.body {
				t.Fatalf("upstream body %q, want %q", s.body, tc.body)
			}
			h.receipt(func(r receipts.Record) bool {
				return r.Decision == receipts.Allow && strings.Contains(strings.Join(r.Secrets, ","), "AWS_SECRET_ACCESS_KEY")
			})
		})
	}
}

func mustSign(t *testing.T, r *http.Request, c sigv4.Credentials, service, amzDate, payload string, headers ...string) {
	t.Helper()
	if err := sigv4.Sign(r, c, "us-east-1", service, amzDate, payload, headers...); err != nil {
		t.Fatal(err)
	}
}

// chunkedRequest is a chunk-signed upload (what the Java SDK sends) of
// 150 KB signed with c; forge signs its second chunk with another key.
func chunkedRequest(t *testing.T, u string, c sigv4.Credentials, amzDate string, forge bool) (*http.Request, []byte) {
	t.Helper()
	data := bytes.Repeat([]byte("chunk-data-"), 15000)
	r, _ := http.NewRequest("POST", u, nil)
	r.Header.Set("X-Amz-Content-Sha256", sigv4.StreamingSigned)
	r.Header.Set("Content-Encoding", "aws-chunked")
	r.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(len(data)))
	mustSign(t, r, c, "s3", amzDate, sigv4.StreamingSigned, "x-amz-content-sha256", "content-encoding", "x-amz-decoded-content-length")
	a, err := sigv4.Parse(r)
	if err != nil {
		t.Fatal(err)
	}
	body := sigv4.SignChunks(data, 64<<10, c, a, a.Signature)
	if forge {
		other := sigv4.SignChunks(data, 64<<10, sigv4.Credentials{Secret: "forged-secret-123"}, a, a.Signature)
		second := bytes.Index(body[1:], []byte(";chunk-signature=")) + 1
		copy(body[second:], other[second:second+100])
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return r, data
}

// presignForTest makes r a presigned URL of c (what aws s3 presign does).
func presignForTest(t *testing.T, r *http.Request, c sigv4.Credentials, amzDate string) {
	t.Helper()
	if err := sigv4.Presign(r, c, "us-east-1", "s3", amzDate, 300); err != nil {
		t.Fatal(err)
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestAWSMintedCredentialsCut: a response to a re-signed request that
// carries a new secret access key (what sts:AssumeRole returns) is cut
// before the key's field reaches the sandbox; an S3 object with the same
// text is the user's data and passes (control).
func TestAWSMintedCredentialsCut(t *testing.T) {
	const amzDate = "20261204T010203Z"
	// The harness upstream echoes the body: the response carries it.
	const body = "Action=AssumeRole&echo=<Credentials><AccessKeyId>ASIANEW</AccessKeyId><SecretAccessKey>minted-secret</SecretAccessKey>"
	for _, service := range []string{"sts", "s3"} {
		t.Run(service, func(t *testing.T) {
			h, ph := awsHarness(t)
			r, _ := http.NewRequest("POST", h.url("https", "allowed.test", "/"), strings.NewReader(body))
			mustSign(t, r, ph, service, amzDate, sha(body))
			resp, err := h.client(false).Do(r)
			var out []byte
			if err == nil {
				out, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if service == "s3" {
				if err != nil || !strings.Contains(string(out), "minted-secret") {
					t.Fatalf("an S3 response with the text: %v %q", err, out)
				}
				return
			}
			if err == nil || strings.Contains(strings.ToLower(string(out)), "secretaccesskey") || strings.Contains(string(out), "minted-secret") {
				t.Fatalf("the minted key reached the client: %v %q", err, out)
			}
			h.receipt(func(r receipts.Record) bool {
				return strings.Contains(r.Reason, "new AWS credentials")
			})
		})
	}
}
