package cli

import (
	"crypto/tls"
	"net"
	"net/http"
	"testing"

	"vak/internal/egress/egresstest"
)

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
