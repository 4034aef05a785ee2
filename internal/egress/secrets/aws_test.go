package secrets

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestGuardMinted: the field name is caught whatever the read sizes and
// case, and nothing of it is returned; other bodies pass unchanged.
func TestGuardMinted(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>s</SecretAccessKey>", ErrMintedCredentials},
		{`{"roleCredentials":{"accessKeyId":"A","secretAccessKey":"s"}}`, ErrMintedCredentials},
		{"secretaccesskey", ErrMintedCredentials},
		{"<Arn>arn:aws:iam::1:user/x</Arn> SecretAccessKe", nil},
		{strings.Repeat("x", 70000), nil},
	} {
		for _, one := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tc.in)
			if one {
				r = iotest.OneByteReader(r)
			}
			out, err := io.ReadAll(GuardMinted(r))
			if !errors.Is(err, tc.want) {
				t.Fatalf("%.40q (one byte %v): %v, want %v", tc.in, one, err, tc.want)
			}
			if tc.want == nil && string(out) != tc.in {
				t.Fatalf("%.40q changed", tc.in)
			}
			if tc.want != nil && strings.Contains(strings.ToLower(string(out)), "secretacc") {
				t.Fatalf("%.40q: returned %q", tc.in, out)
			}
		}
	}
}
