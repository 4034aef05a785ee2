package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTransparentRedirect runs the transparent listener in SO_ORIGINAL_DST
// mode behind a real nftables REDIRECT, inside a private network namespace
// (the test binary re-executes itself under `unshare -n`).
func TestTransparentRedirect(t *testing.T) {
	if os.Getenv("VAK_PROXY_NETNS_CHILD") == "1" {
		redirectChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root for a network namespace with nftables")
	}
	for _, tool := range []string{"unshare", "nft", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s not installed", tool)
		}
	}
	cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^TestTransparentRedirect$", "-test.v")
	cmd.Env = append(os.Environ(), "VAK_PROXY_NETNS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestTransparentRedirect") {
		t.Fatalf("child in a new netns: %v\n%s", err, out)
	}
}

func redirectChild(t *testing.T) {
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "route", "add", "203.0.113.0/24", "dev", "lo", "src", "127.0.0.1"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	h := newHarness(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); h.p.ServeTransparent(l, OriginalDst) }()
	t.Cleanup(func() { l.Close(); <-done })
	port := h.upTLS.Port()
	for _, args := range [][]string{
		{"nft", "add", "table", "ip", "vaktest"},
		{"nft", "add chain ip vaktest out { type nat hook output priority -100; }"},
		{"nft", "add", "rule", "ip", "vaktest", "out", "ip", "daddr", "203.0.113.7", "tcp", "dport", strconv.Itoa(port),
			"redirect", "to", ":" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	tr := h.track(&http.Transport{
		// The client dials an address it made up; the kernel redirects it.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", "203.0.113.7:"+strconv.Itoa(port))
		},
		TLSClientConfig: &tls.Config{RootCAs: h.gwPool()},
	})
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	status, body, _ := get(t, c, "GET", fmt.Sprintf("https://allowed.test:%d/redirected", port), nil, nil)
	if status != 200 || !strings.Contains(body, "path=/redirected") {
		t.Fatalf("redirected request: %d %s", status, body)
	}
	if status, _, _ := get(t, c, "GET", fmt.Sprintf("https://denied.test:%d/", port), nil, nil); status != 403 {
		t.Fatalf("redirected denied name: %d", status)
	}
	if h.canary.Accepted.Load() != 0 {
		t.Fatal("canary reached")
	}
}
