package sigv4

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// TestChunkedDocumentationExample: S3's documented chunk-signed upload
// (64 KiB + 1 KiB of 'a'): the seed signature verifies and the chunk
// signatures are the documented ones.
func TestChunkedDocumentationExample(t *testing.T) {
	r, _ := http.NewRequest("PUT", "https://s3.amazonaws.com/examplebucket/chunkObject.txt", nil)
	for k, v := range map[string]string{
		"X-Amz-Date": "20130524T000000Z", "X-Amz-Storage-Class": "REDUCED_REDUNDANCY",
		"X-Amz-Content-Sha256": StreamingSigned, "Content-Encoding": "aws-chunked",
		"X-Amz-Decoded-Content-Length": "66560", "Content-Length": "66824",
		"Authorization": "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class,Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
	} {
		r.Header.Set(k, v)
	}
	a, err := Parse(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(r, a, docSecretS3, "s3.amazonaws.com", StreamingSigned); err != nil {
		t.Fatalf("seed signature: %v", err)
	}
	body := SignChunks(bytes.Repeat([]byte("a"), 66560), 65536, Credentials{Secret: docSecretS3}, a, a.Signature)
	if len(body) != 66824 {
		t.Errorf("encoded body is %d bytes, want 66824", len(body))
	}
	for _, want := range []string{
		"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648\r\n",
		"400;chunk-signature=0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497\r\n",
		"0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n",
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("no %q", want[:40])
		}
	}
}

// TestResignChunks: a chunk-signed payload made with the placeholder key
// comes out chunk-signed with the real key (same length, same data); a
// changed byte, a chunk signed with another key, or a truncated body fails
// before the chunk is returned.
func TestResignChunks(t *testing.T) {
	ph := Credentials{KeyID: "vakph_k", Secret: "placeholder-secret-1234"}
	real := Credentials{KeyID: "AKIAREAL", Secret: "real/secret+0123456789"}
	a := &Auth{Date: "20261204", Region: "us-east-1", Service: "s3", AmzDate: "20261204T010203Z"}
	fromSeed, toSeed := strings.Repeat("1", 64), strings.Repeat("2", 64)
	data := bytes.Repeat([]byte("0123456789"), 20000)
	in := SignChunks(data, 65536, ph, a, fromSeed)
	want := SignChunks(data, 65536, real, a, toSeed)
	for _, one := range []bool{false, true} {
		var src io.Reader = bytes.NewReader(in)
		if one {
			src = iotest.OneByteReader(src)
		}
		got, err := io.ReadAll(ResignChunks(src, a, ph, real, fromSeed, toSeed))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("re-signed body (one byte %v): %v, %d bytes, equal %v", one, err, len(got), bytes.Equal(got, want))
		}
	}
	tampered := bytes.Replace(in, []byte("0123456789"), []byte("0123456780"), 1)
	forged := SignChunks(data, 65536, Credentials{Secret: "guess-secret-12345"}, a, fromSeed)
	for name, tc := range map[string]struct {
		body []byte
		want error
	}{
		"tampered":  {tampered, ErrMismatch},
		"forged":    {forged, ErrMismatch},
		"truncated": {in[:len(in)-10], ErrMalformed},
		"garbage":   {[]byte("zz;chunk-signature=x\r\n"), ErrMalformed},
		"huge":      {[]byte("7fffffff;chunk-signature=" + strings.Repeat("a", 64) + "\r\n"), ErrMalformed},
	} {
		got, err := io.ReadAll(ResignChunks(bytes.NewReader(tc.body), a, ph, real, fromSeed, toSeed))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
		if name == "tampered" && bytes.Contains(got, []byte("0123456780")) {
			t.Errorf("the tampered chunk was passed on")
		}
	}
}

// FuzzResignChunks: no input panics or passes a chunk the placeholder key
// did not sign.
func FuzzResignChunks(f *testing.F) {
	a := &Auth{Date: "20261204", Region: "r", Service: "s3", AmzDate: "20261204T000000Z"}
	ph := Credentials{Secret: "p"}
	f.Add(SignChunks([]byte("hello"), 2, ph, a, "seed"))
	f.Add([]byte("5;chunk-signature=" + strings.Repeat("0", 64) + "\r\nhello\r\n0;chunk-signature="))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := io.ReadAll(ResignChunks(bytes.NewReader(body), a, ph, Credentials{Secret: "r"}, "seed", "seed2"))
		if err == nil && !bytes.Equal(body, SignChunks(nil, 1, ph, a, "seed")) && len(got) > 0 {
			// Anything accepted must have been signed by the placeholder
			// key: re-signing it back gives the input.
			back, err := io.ReadAll(ResignChunks(bytes.NewReader(got), a, Credentials{Secret: "r"}, ph, "seed2", "seed"))
			if err != nil || !bytes.Equal(back, body[:len(back)]) {
				t.Fatalf("accepted a body that does not round-trip: %v", err)
			}
		}
	})
}
