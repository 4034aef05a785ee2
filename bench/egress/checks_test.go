package main

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
)

// The checks floor must make the checks it claims: each refusal below is a
// request vak's gateway refuses too, and the first case is the positive
// control (the request the bench sends, substituted and forwarded).
func TestRelayChecksRequest(t *testing.T) {
	const port = 8443
	ph := secrets.NewPlaceholder()
	c := newRelayChecks(ph, port)
	host, _, err := policy.ParseAuthority(benchHost, port)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, url, hostHdr, auth string
		refused                          bool
	}{
		{name: "the bench's request", method: "GET", url: "/x", hostHdr: "bench.test:8443", auth: "Bearer " + ph},
		{name: "Host names another host", method: "GET", url: "/x", hostHdr: "other.test:8443", auth: "Bearer " + ph, refused: true},
		{name: "Host names another port", method: "GET", url: "/x", hostHdr: "bench.test:9443", auth: "Bearer " + ph, refused: true},
		{name: "method no rule allows", method: "DELETE", url: "/x", hostHdr: "bench.test:8443", auth: "Bearer " + ph, refused: true},
		{name: "dot segment in the path", method: "GET", url: "/a/%2e%2e/b", hostHdr: "bench.test:8443", auth: "Bearer " + ph, refused: true},
		{name: "foreign credential", method: "GET", url: "/x", hostHdr: "bench.test:8443", auth: "Bearer someone-elses-token-0123456789", refused: true},
		{name: "placeholder in the query", method: "GET", url: "/x?k=" + ph, hostHdr: "bench.test:8443", auth: "Bearer " + ph, refused: true},
		{name: "real value sent by the sandbox", method: "GET", url: "/x", hostHdr: "bench.test:8443", auth: "Bearer " + secretValue, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "https://bench.test:8443"+tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.hostHdr
			req.Header.Set("Authorization", tc.auth)
			req.Header.Set("Connection", "X-Hop")
			req.Header.Set("X-Hop", "1")
			path, stop, err := c.request(req, host, port)
			if tc.refused {
				if !errors.Is(err, errRefused) {
					t.Fatalf("request allowed (err %v), want refused", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			stop()
			if got := req.Header.Get("Authorization"); got != "Bearer "+secretValue {
				t.Errorf("Authorization %q, want the placeholder substituted", got)
			}
			if req.Header.Get("X-Hop") != "" || req.Header.Get("Connection") != "" {
				t.Errorf("hop-by-hop headers forwarded: %v", req.Header)
			}
			if path != "/x" {
				t.Errorf("record path %q", path)
			}
		})
	}
}

// A response carrying the real value reaches the client with the
// placeholder instead, in headers and body, re-framed to its new length.
func TestRelayChecksResponse(t *testing.T) {
	ph := secrets.NewPlaceholder()
	c := newRelayChecks(ph, 443)
	for _, size := range []int{0, relayBuffered + 100} {
		body := "echo " + secretValue + strings.Repeat(".", size)
		resp := &http.Response{StatusCode: 200, Header: http.Header{"X-Echo": {secretValue}, "Content-Length": {"1"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
		if err := c.response(resp); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(got), secretValue) || !strings.Contains(string(got), ph) || resp.Header.Get("X-Echo") != ph {
			t.Errorf("size %d: secret not redacted: header %q, body starts %q", size, resp.Header.Get("X-Echo"), got[:min(len(got), 80)])
		}
		if want := int64(len(got)); size == 0 && resp.ContentLength != want {
			t.Errorf("short body: ContentLength %d, want %d", resp.ContentLength, want)
		}
		if size > 0 && (resp.ContentLength != -1 || len(resp.TransferEncoding) != 1) {
			t.Errorf("long body: ContentLength %d, TransferEncoding %v; want chunked", resp.ContentLength, resp.TransferEncoding)
		}
	}
	gz := &http.Response{StatusCode: 200, Header: http.Header{"Content-Encoding": {"br"}}, Body: http.NoBody}
	if err := c.response(gz); err == nil {
		t.Error("a br-encoded response was relayed unread")
	}
}
