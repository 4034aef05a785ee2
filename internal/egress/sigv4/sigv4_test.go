package sigv4

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The examples of AWS's documentation: the IAM ListUsers request of the
// general SigV4 guide, and S3's GET object with a header signature and as
// a presigned URL.
const (
	docSecretIAM = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	docSecretS3  = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
)

func docRequests(t *testing.T) map[string]struct {
	r      *http.Request
	secret string
	sig    string
} {
	iam, _ := http.NewRequest("GET", "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08", nil)
	iam.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	iam.Header.Set("X-Amz-Date", "20150830T123600Z")
	iam.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7")
	s3, _ := http.NewRequest("GET", "https://examplebucket.s3.amazonaws.com/test.txt", nil)
	s3.Header.Set("Range", "bytes=0-9")
	s3.Header.Set("X-Amz-Content-Sha256", EmptySHA256)
	s3.Header.Set("X-Amz-Date", "20130524T000000Z")
	s3.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
	pre, _ := http.NewRequest("GET", "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404", nil)
	return map[string]struct {
		r      *http.Request
		secret string
		sig    string
	}{
		"iam":     {iam, docSecretIAM, "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"},
		"s3":      {s3, docSecretS3, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"},
		"presign": {pre, docSecretS3, "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"},
	}
}

func TestDocumentationExamples(t *testing.T) {
	for name, c := range docRequests(t) {
		t.Run(name, func(t *testing.T) {
			a, err := Parse(c.r)
			if err != nil {
				t.Fatal(err)
			}
			payload, err := PayloadHash(c.r, a)
			if err != nil {
				t.Fatal(err)
			}
			if payload == "" {
				payload = EmptySHA256
			}
			if _, err := Verify(c.r, a, c.secret, c.r.URL.Host, payload); err != nil {
				t.Fatalf("the documented signature does not verify: %v", err)
			}
			// Control: another secret does not verify.
			if _, err := Verify(c.r, a, c.secret+"x", c.r.URL.Host, payload); !errors.Is(err, ErrMismatch) {
				t.Fatalf("a wrong secret: %v", err)
			}
		})
	}
}

// TestResign: a request signed with the placeholder credentials is signed
// again with the real ones and verifies with the real secret (and no
// longer with the placeholder's); the session token follows; a request
// the placeholder did not sign, or whose signed parts changed, is refused.
func TestResign(t *testing.T) {
	ph := Credentials{KeyID: "vakph_key", Secret: "vakph_secret0123456789", Token: "vakph_token"}
	real := Credentials{KeyID: "AKIAREAL", Secret: "realsecret/0123456789+abc", Token: "REALTOKEN"}
	for _, tc := range []struct {
		name, service, url, payload string
		presign                     bool
		mutate                      func(r *http.Request)
		want                        error
	}{
		{name: "s3 header", service: "s3", url: "https://b.s3.aws.test:8443/dir/a%20key+x?list-type=2&prefix=", payload: UnsignedPayload},
		{name: "sts body", service: "sts", url: "https://sts.aws.test/", payload: EmptySHA256},
		{name: "double path", service: "execute-api", url: "https://api.aws.test/a/./b//c%2Fd", payload: EmptySHA256},
		{name: "presigned", service: "s3", url: "https://b.s3.aws.test/k", presign: true, payload: UnsignedPayload},
		{name: "tampered", service: "s3", url: "https://b.s3.aws.test/k", payload: UnsignedPayload, mutate: func(r *http.Request) { r.URL.Path = "/other"; r.URL.RawPath = "" }, want: ErrMismatch},
		{name: "tampered query", service: "s3", url: "https://b.s3.aws.test/k?a=1", payload: UnsignedPayload, mutate: func(r *http.Request) { r.URL.RawQuery = "a=2" }, want: ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", tc.url, nil)
			r.Header.Set("X-Amz-Content-Sha256", tc.payload)
			if tc.presign {
				presign(t, r, ph, "us-east-1", tc.service, "20261204T010203Z")
			} else if err := Sign(r, ph, "us-east-1", tc.service, "20261204T010203Z", tc.payload, "x-amz-content-sha256"); err != nil {
				t.Fatal(err)
			}
			if tc.mutate != nil {
				tc.mutate(r)
			}
			a, err := Parse(r)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Resign(r, a, ph, real, r.URL.Host, tc.payload)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Resign: %v, want %v", err, tc.want)
			}
			if err != nil {
				return
			}
			b, err := Parse(r)
			if err != nil {
				t.Fatalf("re-signed request does not parse: %v", err)
			}
			if b.KeyID != real.KeyID {
				t.Fatalf("key %q", b.KeyID)
			}
			if _, err := Verify(r, b, real.Secret, r.URL.Host, tc.payload); err != nil {
				t.Fatalf("re-signed request does not verify with the real secret: %v", err)
			}
			if _, err := Verify(r, b, ph.Secret, r.URL.Host, tc.payload); err == nil {
				t.Fatal("re-signed request verifies with the placeholder")
			}
			all := r.URL.String() + strings.Join(r.Header.Values("Authorization"), "") + r.Header.Get("X-Amz-Security-Token")
			if strings.Contains(all, "vakph_") || !strings.Contains(all, "REALTOKEN") || strings.Contains(all, real.Secret) {
				t.Fatalf("re-signed request: %s", all)
			}
		})
	}
}

func presign(t *testing.T, r *http.Request, c Credentials, region, service, amzDate string) {
	t.Helper()
	if err := Presign(r, c, region, service, amzDate, 300); err != nil {
		t.Fatal(err)
	}
	r.Header.Del("X-Amz-Content-Sha256")
}

func TestParseRefuses(t *testing.T) {
	hdr := func(v string, extra ...string) *http.Request {
		r, _ := http.NewRequest("GET", "https://s3.aws.test/k", nil)
		r.Header.Set("X-Amz-Date", "20261204T010203Z")
		r.Header.Add("Authorization", v)
		for _, e := range extra {
			r.Header.Add("Authorization", e)
		}
		return r
	}
	good := "AWS4-HMAC-SHA256 Credential=K/20261204/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		r    *http.Request
		want error
	}{
		{"none", hdr("Bearer x"), ErrNotSigned},
		{"good", hdr(good), nil},
		{"twice", hdr(good, good), ErrMalformed},
		{"header and query", func() *http.Request {
			r := hdr(good)
			r.URL.RawQuery = "X-Amz-Algorithm=AWS4-HMAC-SHA256"
			return r
		}(), ErrMalformed},
		{"ecdsa", hdr("AWS4-ECDSA-P256-SHA256 Credential=K/20261204/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=" + strings.Repeat("a", 64)), ErrUnsupported},
		{"unsorted", hdr(strings.Replace(good, "host;x-amz-date", "x-amz-date;host", 1)), ErrMalformed},
		{"no host", hdr(strings.Replace(good, "host;x-amz-date", "x-amz-date", 1)), ErrMalformed},
		{"dup field", hdr(good + ", Signature=" + strings.Repeat("b", 64)), ErrMalformed},
		{"short sig", hdr(strings.Replace(good, strings.Repeat("a", 64), "abc", 1)), ErrMalformed},
		{"date mismatch", hdr(strings.Replace(good, "20261204", "20261203", 1)), ErrMalformed},
		{"query garbage", func() *http.Request {
			r, _ := http.NewRequest("GET", "https://s3.aws.test/k", nil)
			r.URL.RawQuery = "X-Amz-Algorithm=%zz"
			return r
		}(), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.r); !errors.Is(err, tc.want) {
				t.Fatalf("Parse: %v, want %v", err, tc.want)
			}
		})
	}
	r := hdr(good)
	r.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")
	a, _ := Parse(r)
	if _, err := PayloadHash(r, a); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("chunk-signed payload with signed trailers: %v", err)
	}
}

// FuzzParse: whatever the sandbox sends, Parse and a re-sign attempt
// neither panic nor re-sign what the placeholder did not sign.
func FuzzParse(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=K/20261204/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature="+strings.Repeat("a", 64), "", "/k")
	f.Add("", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=K%2F20261204%2Fr%2Fs3%2Faws4_request&X-Amz-Date=20261204T000000Z&X-Amz-SignedHeaders=host&X-Amz-Signature="+strings.Repeat("0", 64), "/a/../b")
	f.Fuzz(func(t *testing.T, auth, query, p string) {
		u, err := url.Parse("https://s3.aws.test" + "/" + strings.TrimPrefix(p, "/"))
		if err != nil {
			return
		}
		u.RawQuery = query
		r := &http.Request{Method: "GET", URL: u, Header: http.Header{}, Host: u.Host}
		r.Header.Set("X-Amz-Date", "20261204T000000Z")
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		a, err := Parse(r)
		if err != nil {
			return
		}
		if _, err := Resign(r, a, Credentials{KeyID: "K", Secret: "s"}, Credentials{KeyID: "R", Secret: "t"}, u.Host, UnsignedPayload); err == nil {
			t.Fatalf("re-signed a request the placeholder never signed: %+v", a)
		}
	})
}
