package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vak/internal/testenv/testnet"
)

// Counts is what a canary has received (see testnet.Counts).
type Counts = testnet.Counts

// TestNet returns a host build of scripts/testnet (for gencert, or to run a
// role on the host).
func TestNet(t testing.TB) string { return Build(t, "vak/scripts/testnet") }

var (
	testNetOnce sync.Once
	testNetErr  string
)

// TestNetImage returns the test image (see Image) after checking that its
// /bin/testnet speaks this tree's testnet.APIVersion; an image built before
// testnet existed, or from an older tree, skips or fails t with a hint to
// rebuild it.
func TestNetImage(t testing.TB) string {
	t.Helper()
	img := Image(t)
	testNetOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none",
			"--label", TestLabel+"=1", img, "/bin/testnet", "version").CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != testnet.APIVersion {
			testNetErr = fmt.Sprintf("test image %s has no current /bin/testnet (want %s, got %q, %v): run scripts/build-test-images.sh",
				img, testnet.APIVersion, got, err)
		}
	})
	if testNetErr != "" {
		Missing(t, EnvRequireDocker, testNetErr)
	}
	return img
}

// Certs are the files `testnet gencert` writes.
type Certs struct {
	Dir  string
	CA   string // ca.pem: the test CA (give it to clients and the gateway)
	Cert string // cert.pem: the leaf for the names
	Key  string // key.pem: the leaf's key
}

// GenCerts writes a fresh test CA and a leaf certificate for names into a
// new temporary directory (removed when t ends), using the host build of
// `testnet gencert`. The directory is world-readable so it can be
// bind-mounted into containers.
func GenCerts(t testing.TB, names ...string) Certs {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	out, err := exec.Command(TestNet(t), "gencert", "--ca-out", dir, "--names", strings.Join(names, ",")).CombinedOutput()
	if err != nil {
		t.Fatalf("testnet gencert: %v: %s", err, out)
	}
	return Certs{Dir: dir, CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
}

// Internet is the hermetic "internet" of the proxied tests: a Docker
// network with an HTTPS upstream and a canary on it.
type Internet struct {
	Network    string
	Certs      Certs  // the upstream's certificate and its CA
	UpstreamIP string // testnet upstream: HTTPS for the names, HTTP
	CanaryIP   string // testnet canary: counts whatever reaches it
}

// StartInternet creates the network and starts, from image (TestNetImage's),
// an upstream serving a certificate for names and a canary, and waits until
// both are ready. Everything is removed when t ends.
func StartInternet(t testing.TB, image string, names ...string) Internet {
	t.Helper()
	in := Internet{Certs: GenCerts(t, names...), Network: CreateNetwork(t, UniqueName("internet"))}
	upID, upIP := RunContainer(t, "", in.Network, "-v", in.Certs.Dir+":/certs:ro", image, "testnet", "upstream", "--cert", "/certs/cert.pem", "--key", "/certs/key.pem")
	canID, canIP := RunContainer(t, "", in.Network, image, "testnet", "canary")
	WaitReady(t, upID)
	WaitReady(t, canID)
	in.UpstreamIP, in.CanaryIP = upIP, canIP
	return in
}

// CanaryCounts returns what the canary at addr (its IP, or IP:port when
// the control port is not the default) has received since it started or
// was last reset.
func CanaryCounts(t testing.TB, addr string) Counts {
	t.Helper()
	var c Counts
	control(t, http.MethodGet, addr, "/counts", &c)
	return c
}

// ResetCanary zeroes the canary's counts and returns what they were.
func ResetCanary(t testing.TB, addr string) Counts {
	t.Helper()
	var c Counts
	control(t, http.MethodPost, addr, "/reset", &c)
	return c
}

// UpstreamRequests returns the requests the upstream at addr (IP, or
// IP:port) has served since it started or was last reset.
func UpstreamRequests(t testing.TB, addr string) testnet.Requests {
	t.Helper()
	var r testnet.Requests
	control(t, http.MethodGet, addr, "/requests", &r)
	return r
}

// ResetUpstream forgets the upstream's requests and returns them.
func ResetUpstream(t testing.TB, addr string) testnet.Requests {
	t.Helper()
	var r testnet.Requests
	control(t, http.MethodPost, addr, "/reset", &r)
	return r
}

// controlTimeout bounds a control-port call, including retries while the
// role is still starting.
const controlTimeout = 15 * time.Second

// control calls a testnet role's control API and decodes the JSON answer.
// It retries while the port refuses connections (a role just started).
func control(t testing.TB, method, addr, path string, v any) {
	t.Helper()
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, strconv.Itoa(testnet.DefaultControlPort))
	}
	url := "http://" + addr + path
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	deadline := time.Now().Add(controlTimeout)
	for {
		req, _ := http.NewRequest(method, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			t.Fatalf("testnet control %s %s: %v", method, url, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("testnet control %s %s: status %d, %v: %s", method, url, resp.StatusCode, err, body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("testnet control %s %s: decode: %v: %s", method, url, err, body)
		}
		return
	}
}
