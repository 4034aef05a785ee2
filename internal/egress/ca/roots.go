package ca

import (
	"crypto/x509"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// AddCompiledRoots adds the root set compiled into vak (Mozilla's, from
// golang.org/x/crypto/x509roots/fallback) to pool, with the constraints the
// bundle attaches to distrusted-after roots. The gateway image is FROM
// scratch: without these, its system pool is empty and every upstream
// TLS connection would fail with "certificate signed by unknown authority".
func AddCompiledRoots(pool *x509.CertPool) int {
	n := 0
	for r := range bundle.Roots() {
		c, err := x509.ParseCertificate(r.Certificate)
		if err != nil {
			continue
		}
		if r.Constraint == nil {
			pool.AddCert(c)
		} else {
			pool.AddCertWithConstraint(c, r.Constraint)
		}
		n++
	}
	return n
}

// CompiledRoots is the number of root certificates compiled into vak that
// the gateway trusts for upstream TLS (besides the system pool and
// extra_ca_bundles).
func CompiledRoots() int {
	return AddCompiledRoots(x509.NewCertPool())
}
