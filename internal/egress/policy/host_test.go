package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		name string
		addr string
		bad  bool
	}{
		{in: "example.com", name: "example.com"},
		{in: "Example.COM", name: "example.com"},
		{in: "example.com.", name: "example.com"},
		{in: "EXAMPLE.com.", name: "example.com"},
		{in: "example.com..", bad: true},
		{in: ".example.com", bad: true},
		{in: "a..b", bad: true},
		{in: "r3---sn-abc.googlevideo.com", name: "r3---sn-abc.googlevideo.com"},
		{in: "_acme.example.com", name: "_acme.example.com"},
		{in: "bücher.example", name: "xn--bcher-kva.example"},
		{in: "xn--bcher-kva.example", name: "xn--bcher-kva.example"},
		// Cyrillic 'а' (U+0430) homograph of apple.com: a different name.
		{in: "\u0430pple.com", name: "xn--pple-43d.com"},
		// Fullwidth letters are mapped to ASCII, as resolvers do.
		{in: "ｅxample.com", name: "example.com"},
		{in: "xn--invalid-punycode-\u00ff.com", bad: true},
		{in: "exa\x00mple.com", bad: true},
		{in: "example.com\x00.evil.com", bad: true},
		{in: "example.com%00.evil.com", bad: true},
		{in: "example%2ecom", bad: true},
		{in: "exa mple.com", bad: true},
		{in: "user@example.com", bad: true},
		{in: "example.com/path", bad: true},
		{in: "example.com\\x", bad: true},
		{in: "example.com:443", bad: true},
		{in: "", bad: true},
		{in: "*.example.com", bad: true},
		{in: strings.Repeat("a", 64) + ".com", bad: true},
		{in: strings.Repeat("a.", 130) + "com", bad: true},
		{in: "127.1", bad: true},
		{in: "0x7f.1", bad: true},
		{in: "foo.0x7f", bad: true},
		{in: "2130706433", bad: true},
		{in: "1.2.3.4", addr: "1.2.3.4"},
		{in: "[::1]", addr: "::1"},
		{in: "::1", addr: "::1"},
		{in: "[fe80::1%eth0]", bad: true},
		{in: "fe80::1%eth0", bad: true},
		{in: "[1.2.3.4]", bad: true},
		{in: "[::1", bad: true},
	}
	for _, tc := range tests {
		h, err := NormalizeHost(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("NormalizeHost(%q) = %+v, want error", tc.in, h)
			} else if !errors.Is(err, ErrBadHost) {
				t.Errorf("NormalizeHost(%q) error %v does not wrap ErrBadHost", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("NormalizeHost(%q): %v", tc.in, err)
			continue
		}
		if tc.addr != "" {
			if h.Addr != netip.MustParseAddr(tc.addr) || h.Name != "" {
				t.Errorf("NormalizeHost(%q) = %+v, want addr %s", tc.in, h, tc.addr)
			}
			continue
		}
		if h.Name != tc.name || h.IsIP() {
			t.Errorf("NormalizeHost(%q) = %+v, want %q", tc.in, h, tc.name)
		}
	}
}

func TestParseAuthority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		def  uint16
		host string
		port uint16
		bad  bool
	}{
		{in: "example.com:443", host: "example.com", port: 443},
		{in: "EXAMPLE.com.:8443", host: "example.com", port: 8443},
		{in: "example.com", def: 80, host: "example.com", port: 80},
		{in: "example.com", bad: true},
		{in: "example.com:", bad: true},
		{in: "example.com:0", bad: true},
		{in: "example.com:65536", bad: true},
		{in: "example.com:+443", bad: true},
		{in: "example.com:0443", host: "example.com", port: 443},
		{in: "example.com:44 3", bad: true},
		{in: "[::1]:443", host: "::1", port: 443},
		{in: "[::1]", def: 443, host: "::1", port: 443},
		{in: "[::1]x:443", bad: true},
		{in: "1.2.3.4:22", host: "1.2.3.4", port: 22},
		{in: "user:pw@example.com:443", bad: true},
		{in: "example.com%00:443", bad: true},
		{in: "exa\x00mple.com:443", bad: true},
		{in: ":443", bad: true},
	}
	for _, tc := range tests {
		h, port, err := ParseAuthority(tc.in, tc.def)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseAuthority(%q) = %v %d, want error", tc.in, h, port)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseAuthority(%q): %v", tc.in, err)
			continue
		}
		if h.String() != tc.host || port != tc.port {
			t.Errorf("ParseAuthority(%q) = %v %d, want %s %d", tc.in, h, port, tc.host, tc.port)
		}
		// Round trip.
		h2, p2, err := ParseAuthority(FormatAuthority(h, port), 0)
		if err != nil || h2 != h || p2 != port {
			t.Errorf("round trip of %q via %q = %v %d %v", tc.in, FormatAuthority(h, port), h2, p2, err)
		}
	}
}

func TestHostPattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pat   string
		host  string
		match bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "EXAMPLE.COM.", true},
		{"Example.Com.", "example.com", true},
		{"example.com", "www.example.com", false},
		{"example.com", "example.com.evil.com", false},
		{"example.com", "evilexample.com", false},
		{"*.example.com", "example.com", false},
		{"*.example.com", "www.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "WWW.Example.Com.", true},
		{"*.example.com", "wwwexample.com", false},
		{"*.example.com", "example.com.evil.com", false},
		{"*", "anything.at.all", true},
		{"apple.com", "\u0430pple.com", false},
		{"bücher.example", "xn--bcher-kva.example", true},
		{"*.bücher.example", "www.XN--BCHER-KVA.example", true},
	}
	for _, tc := range tests {
		p, err := ParseHostPattern(tc.pat)
		if err != nil {
			t.Fatalf("ParseHostPattern(%q): %v", tc.pat, err)
		}
		h, err := NormalizeHost(tc.host)
		if err != nil {
			t.Fatalf("NormalizeHost(%q): %v", tc.host, err)
		}
		if got := p.Match(h.Name); got != tc.match {
			t.Errorf("%q.Match(%q) = %v, want %v", tc.pat, tc.host, got, tc.match)
		}
	}
	for _, bad := range []string{"", "a*.example.com", "*example.com", "www.*.example.com", "**.example.com", "*.*.example.com", "1.2.3.4", "*.", "example.com:443", "ex ample.com"} {
		if p, err := ParseHostPattern(bad); err == nil {
			t.Errorf("ParseHostPattern(%q) = %v, want error", bad, p)
		}
	}
}

func TestPathPattern(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pat   string
		path  string
		match bool
	}{
		{"/repos", "/repos", true},
		{"/repos", "/repos/", true},
		{"/repos", "/repos/a/b", true},
		{"/repos", "/repository", false},
		{"/v1/", "/v1/x", true},
		{"/v1/", "/v1", false},
		{"/", "/anything", true},
		{"/repos/*/issues", "/repos/vak/issues", true},
		{"/repos/*/issues", "/repos/a/b/issues", false},
		{"/repos/*/issues", "/repos/vak/issues/1", false},
		{"/repos/**", "/repos", true},
		{"/repos/**", "/repos/a/b/c", true},
		{"/repos/**/pulls", "/repos/a/b/pulls", true},
		{"/repos/**/pulls", "/repos/pulls", true},
		{"/files/*.tar.gz", "/files/x.tar.gz", true},
		{"/files/*.tar.gz", "/files/x.zip", false},
		{"/a*b*c", "/axxbyyc", true},
		{"/a*b*c", "/axxbyy", false},
	}
	for _, tc := range tests {
		p, err := ParsePathPattern(tc.pat)
		if err != nil {
			t.Fatalf("ParsePathPattern(%q): %v", tc.pat, err)
		}
		if got := p.Match(tc.path); got != tc.match {
			t.Errorf("%q.Match(%q) = %v, want %v", tc.pat, tc.path, got, tc.match)
		}
	}
	for _, bad := range []string{"", "repos", "/a//b", "/a/../b", "/./a", "/a?b", "/a#b", "/a\\b", "/a**b", "/a\x00"} {
		if _, err := ParsePathPattern(bad); err == nil {
			t.Errorf("ParsePathPattern(%q) succeeded, want error", bad)
		}
	}
	for _, bad := range []string{"/a/../admin", "/a//b", "/./x", "/a/..", "x", "/a\\..\\b", "/a\x00b"} {
		if err := CanonicalPath(bad); err == nil {
			t.Errorf("CanonicalPath(%q) = nil, want error", bad)
		}
	}
	for _, good := range []string{"/", "/a/b/", "/a.b/c..d", ""} {
		if err := CanonicalPath(good); err != nil {
			t.Errorf("CanonicalPath(%q) = %v", good, err)
		}
	}
}

func TestIsPublic(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "151.101.1.69"} {
		if !IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = false", s)
		}
	}
	for _, s := range []string{
		"127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "100.64.0.1", "100.127.255.255", "0.0.0.0", "255.255.255.255",
		"224.0.0.1", "::1", "::", "fe80::1", "fc00::1", "fd00:ec2::254",
		"::ffff:8.8.8.8", "::ffff:127.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1",
		"2001:db8::1", "2001::1", "198.18.0.1",
	} {
		if IsPublic(netip.MustParseAddr(s)) {
			t.Errorf("IsPublic(%s) = true", s)
		}
	}
}
