package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pkiFiles are the files writePKI makes for APIServer.
type pkiFiles struct {
	CA, ServerCert, ServerKey, AdminCert, AdminKey, SAKey, SAPub string
}

// writePKI writes into dir a CA, a serving certificate for 127.0.0.1, a
// client certificate in system:masters and a service-account key pair
// (ECDSA P-256 throughout: fast to generate).
func writePKI(dir string) (pkiFiles, error) {
	f := pkiFiles{
		CA: filepath.Join(dir, "ca.crt"), ServerCert: filepath.Join(dir, "apiserver.crt"),
		ServerKey: filepath.Join(dir, "apiserver.key"), AdminCert: filepath.Join(dir, "admin.crt"),
		AdminKey: filepath.Join(dir, "admin.key"), SAKey: filepath.Join(dir, "sa.key"), SAPub: filepath.Join(dir, "sa.pub"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vak test apiserver CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, IsCA: true, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return f, fmt.Errorf("CA certificate: %w", err)
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return f, err
	}
	leaves := []struct {
		cert, key string
		tmpl      x509.Certificate
	}{
		{f.ServerCert, f.ServerKey, x509.Certificate{
			Subject: pkix.Name{CommonName: "kube-apiserver"}, DNSNames: []string{"localhost", "kubernetes.default.svc"},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}},
		{f.AdminCert, f.AdminKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "vak-test-admin", Organization: []string{"system:masters"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	}
	for i, l := range leaves {
		l.tmpl.SerialNumber = big.NewInt(int64(i + 2))
		l.tmpl.NotBefore, l.tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		l.tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if err := writeLeaf(l.cert, l.key, &l.tmpl, ca, caKey); err != nil {
			return f, err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, fmt.Errorf("service-account key: %w", err)
	}
	if err := writeKey(f.SAKey, saKey); err != nil {
		return f, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return f, fmt.Errorf("service-account public key: %w", err)
	}
	return f, writePEM(f.SAPub, "PUBLIC KEY", pub)
}

func writeLeaf(certPath, keyPath string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("key for %s: %w", tmpl.Subject.CommonName, err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("certificate for %s: %w", tmpl.Subject.CommonName, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key %s: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
