package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"vak/internal/receipts"
)

// BenchmarkExplicitGET measures keep-alive HTTPS GETs through the explicit
// proxy with a header secret substitution (for profiling; the side-by-side
// comparison lives in bench/egress).
func BenchmarkExplicitGET(b *testing.B) {
	h := newHarness(b)
	c := h.client(false)
	u := h.url("https", "allowed.test", "/bench")
	hdr := "Bearer " + h.env("GH_TOKEN")
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", hdr)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.Status)
		}
	}
}

// BenchmarkExplicitGETFileReceipts is BenchmarkExplicitGET with receipts
// written to a real, signed log file (as the gateway does).
func BenchmarkExplicitGETFileReceipts(b *testing.B) {
	h := newHarness(b)
	key, err := receipts.LoadOrCreateKey(filepath.Join(b.TempDir(), "key"))
	if err != nil {
		b.Fatal(err)
	}
	l, err := receipts.OpenSigned(filepath.Join(b.TempDir(), "r.jsonl"), key)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	h.p.Receipts = l
	c := h.client(false)
	u := h.url("https", "allowed.test", "/bench")
	hdr := "Bearer " + h.env("GH_TOKEN")
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", hdr)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkDirectGET is the same request without the gateway (baseline).
func BenchmarkDirectGET(b *testing.B) {
	h := newHarness(b)
	tr := h.track(&http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: h.upCA.Pool()},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return net.Dial("tcp", h.upTLS.Listener.Addr().String())
		},
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	})
	c := &http.Client{Transport: tr}
	u := h.url("https", "allowed.test", "/bench")
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+ghValue)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
