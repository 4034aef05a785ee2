package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"vak/internal/receipts"
)

func TestSecretSubstitution(t *testing.T) {
	h := newHarness(t)
	gh, ai := h.env("GH_TOKEN"), h.env("AI_KEY")
	for _, h2 := range []bool{false, true} {
		name := map[bool]string{false: "http1", true: "http2"}[h2]
		t.Run(name, func(t *testing.T) {
			c := h.client(h2)
			// Header placeholder to the bound host: the upstream receives the
			// real value; the echo coming back is redacted to the placeholder.
			status, body, hdr := get(t, c, "GET", h.url("https", "allowed.test", "/h"), http.Header{"Authorization": {"Bearer " + gh}}, nil)
			if status != 200 {
				t.Fatalf("%d %s", status, body)
			}
			last := h.seen.last(t)
			if last.auth != "Bearer "+ghValue {
				t.Fatalf("upstream got Authorization %q", last.auth)
			}
			if h2 && last.proto != 2 {
				t.Fatalf("upstream leg was HTTP/%d, want 2", last.proto)
			}
			if strings.Contains(body, ghValue) || !strings.Contains(body, "auth=Bearer "+gh) {
				t.Fatalf("response body not redacted: %s", body)
			}
			if hdr.Get("X-Echo-Auth") != "Bearer "+gh {
				t.Fatalf("response header not redacted: %q", hdr.Get("X-Echo-Auth"))
			}
			// Query injection (allowed for AI_KEY).
			status, body, _ = get(t, c, "GET", h.url("https", "allowed.test", "/q?key="+ai+"&x=1"), nil, nil)
			if status != 200 || h.seen.last(t).query != "key="+url.QueryEscape(aiValue)+"&x=1" || strings.Contains(body, aiValue) {
				t.Fatalf("query: %d %q %s", status, h.seen.last(t).query, body)
			}
			// Body injection, content-length body.
			status, body, _ = get(t, c, "POST", h.url("https", "allowed.test", "/b"), nil, strings.NewReader(`{"k":"`+ai+`"}`))
			if status != 200 || h.seen.last(t).body != `{"k":"`+aiValue+`"}` || strings.Contains(body, aiValue) {
				t.Fatalf("body: %d %q %s", status, h.seen.last(t).body, body)
			}
			// Body injection, chunked body of unknown length with the
			// placeholder split across writes.
			pr, pw := io.Pipe()
			go func() {
				for _, part := range []string{`{"k":"`, ai[:5], ai[5:20], ai[20:], `"}`} {
					pw.Write([]byte(part))
				}
				pw.Close()
			}()
			status, _, _ = get(t, c, "POST", h.url("https", "allowed.test", "/chunked"), nil, pr)
			if status != 200 || h.seen.last(t).body != `{"k":"`+aiValue+`"}` {
				t.Fatalf("chunked body: %d %q", status, h.seen.last(t).body)
			}
		})
	}
}

func TestSecretBlockedToUnboundHosts(t *testing.T) {
	h := newHarness(t)
	gh, ai := h.env("GH_TOKEN"), h.env("AI_KEY")
	for _, h2 := range []bool{false, true} {
		c := h.client(h2)
		before := len(h.seen.all())
		tests := []struct {
			name   string
			method string
			u      string
			hdr    http.Header
			body   string
		}{
			{"header to unbound allowed host", "GET", h.url("https", "other.test", "/"), http.Header{"Authorization": {"Bearer " + gh}}, ""},
			{"query to unbound host", "GET", h.url("https", "other.test", "/?k="+ai), nil, ""},
			{"body to unbound host", "POST", h.url("https", "other.test", "/"), nil, strings.Repeat("x", 70000) + ai},
			{"header-only secret in query of bound host", "GET", h.url("https", "allowed.test", "/?t="+gh), nil, ""},
			{"header-only secret in body of bound host", "POST", h.url("https", "allowed.test", "/"), nil, "t=" + gh},
			{"placeholder in path", "GET", h.url("https", "allowed.test", "/x/"+ai), nil, ""},
			{"plain http to unbound host", "GET", h.url("http", "other.test", "/"), http.Header{"X-Key": {ai}}, ""},
		}
		for _, tc := range tests {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			status, resp, _ := get(t, c, tc.method, tc.u, tc.hdr, body)
			if status != 403 {
				t.Errorf("h2=%v %s: %d %s", h2, tc.name, status, resp)
			}
		}
		// Chunked body (unknown length) with the placeholder split across
		// writes, to an unbound host.
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte(strings.Repeat("y", 5000) + ai[:7]))
			pw.Write([]byte(ai[7:] + "tail"))
			pw.Close()
		}()
		if status, resp, _ := get(t, c, "POST", h.url("https", "other.test", "/chunked"), nil, pr); status != 403 {
			t.Errorf("h2=%v chunked body to unbound host: %d %s", h2, status, resp)
		}
		for _, r := range h.seen.all()[before:] {
			for _, bad := range []string{gh, ai, ghValue, aiValue} {
				if strings.Contains(r.query+r.auth+r.body+r.path, bad) {
					t.Fatalf("h2=%v: upstream received a placeholder or value: %+v", h2, r)
				}
			}
		}
	}
	// Transparent path too (HTTP/2 over intercepted TLS).
	canary := netip.AddrPortFrom(netip.MustParseAddr(canaryIP), uint16(h.upTLS.Port()))
	status, _, _ := get(t, h.transparentClient(canary, true), "GET", h.url("https", "other.test", "/"), http.Header{"Authorization": {"token " + gh}}, nil)
	if status != 403 {
		t.Fatalf("transparent h2 placeholder to unbound host: %d", status)
	}
	r := h.receipt(func(r receipts.Record) bool {
		return r.Host == "other.test" && r.Decision == receipts.Deny && strings.Contains(r.Reason, "placeholder of secret")
	})
	if r.Status != 403 {
		t.Fatalf("receipt %+v", r)
	}
	h.noSecretsInReceipts()
}

func TestRedactionAcrossChunks(t *testing.T) {
	h := newHarness(t)
	for _, h2 := range []bool{false, true} {
		status, body, _ := get(t, h.client(h2), "GET", h.url("https", "allowed.test", "/split"), nil, nil)
		want := fmt.Sprintf("before %s middle %s after", h.env("GH_TOKEN"), h.env("AI_KEY"))
		if status != 200 || body != want {
			t.Fatalf("h2=%v: got %q\nwant %q", h2, body, want)
		}
	}
	// Plain HTTP and the transparent path redact too.
	status, body, _ := get(t, h.client(false), "GET", h.url("http", "allowed.test", "/split"), nil, nil)
	if status != 200 || strings.Contains(body, ghValue[3:11]) {
		t.Fatalf("plain: %q", body)
	}
	h.noSecretsInReceipts()
}
