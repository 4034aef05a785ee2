package cli

import (
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"vak/internal/egress/egresstest"
	"vak/internal/testenv"
)

// The helpers of the tests that run real clients (agent CLIs, gh, the AWS
// CLI) against local mocks of the services they call.

// codexCLI is the real Codex CLI's native binary ($VAK_TEST_CODEX, else
// codex on PATH, links resolved); a missing one skips the test unless
// VAK_REQUIRE_CODEX=1.
func codexCLI(t *testing.T) string {
	t.Helper()
	codex := os.Getenv(EnvCodex)
	if codex == "" {
		codex, _ = exec.LookPath("codex")
	}
	if codex == "" {
		testenv.Missing(t, EnvRequireCodex, "no Codex CLI (npm install @openai/codex; set "+EnvCodex+" to its native binary)")
	}
	codex, err := filepath.EvalSymlinks(codex)
	if err != nil {
		t.Fatal(err)
	}
	return codex
}

// tlsMock serves h over TLS on ip:port (0: a free port) with a
// certificate for names from ca, until the test ends, and returns the
// port. A real client reaches it through the gateway only, which trusts
// ca through [gateway] extra_ca_bundles.
func tlsMock(t *testing.T, ca *egresstest.CA, ip string, port int, h http.Handler, names ...string) int {
	t.Helper()
	l := egresstest.Listen(t, ip, port)
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{ca.Cert(t, names...)}}}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}
