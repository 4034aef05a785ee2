package proxynet

import (
	"fmt"
	"os"
	"strings"

	"vak/internal/egress/ca"
)

// hostRootsName is the host system bundle's copy in the gateway's volume.
const hostRootsName = "ca-bundles/host-system.pem"

// hostRoots returns the host's system root bundle and the file it came
// from: file when set, else $SSL_CERT_FILE when set (as Go and OpenSSL
// read it), else the first of SystemRootFiles that exists. The host bundle
// is where users install corporate and proxy CAs, so the gateway trusts it
// for upstream TLS too. A bundle with no certificate counts as none.
func hostRoots(file string) ([]byte, string) {
	files := SystemRootFiles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = []string{f}
	}
	if file != "" {
		files = []string{file}
	}
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			if certs, err := parseCerts(data); err == nil && len(certs) > 0 {
				return data, f
			}
		}
	}
	return nil, ""
}

// RootsReport says which roots a topology's gateway trusts for upstream
// TLS (what `vak doctor` prints).
type RootsReport struct {
	// Compiled is the number of roots compiled into vak
	// (golang.org/x/crypto/x509roots/fallback).
	Compiled int
	// HostFile is the host system bundle copied into the gateway at
	// topology creation ("" when there is none), HostCerts its certificates.
	HostFile  string
	HostCerts int
	// Extra are the [gateway] extra_ca_bundles.
	Extra []string
}

// UpstreamRoots reports the roots a topology created now would trust.
// hostFile overrides the host bundle's location ("" = SystemRootFiles).
func UpstreamRoots(hostFile string, extra []string) RootsReport {
	r := RootsReport{Compiled: ca.CompiledRoots(), Extra: extra}
	if data, f := hostRoots(hostFile); f != "" {
		certs, _ := parseCerts(data)
		r.HostFile, r.HostCerts = f, len(certs)
	}
	return r
}

func (r RootsReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d compiled into vak", r.Compiled)
	if r.HostFile != "" {
		fmt.Fprintf(&b, ", %d from the host bundle %s (copied at topology creation)", r.HostCerts, r.HostFile)
	} else {
		b.WriteString(", no host system bundle found")
	}
	if len(r.Extra) > 0 {
		fmt.Fprintf(&b, ", extra_ca_bundles %s", strings.Join(r.Extra, " "))
	}
	return b.String()
}
