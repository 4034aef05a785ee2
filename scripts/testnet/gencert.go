package main

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

// Names of the files gencert writes.
const (
	caFile   = "ca.pem"
	certFile = "cert.pem"
	keyFile  = "key.pem"
)

// caCommonName is the subject CN of every CA gencert makes (what
// `probe tls` prints as issuer= when it talks to an upstream directly).
const caCommonName = "vak testnet CA"

func runGencert(args []string) error {
	fs := newFlags("gencert")
	dir := fs.String("ca-out", "", "directory to write ca.pem, cert.pem and key.pem into")
	names := fs.String("names", "", "comma-separated DNS names (or IPs) for the leaf certificate")
	days := fs.Int("days", 30, "validity of both certificates, in days")
	if err := parse(fs, args); err != nil {
		return err
	}
	list := splitList(*names)
	if *dir == "" || len(list) == 0 || *days < 1 {
		return fmt.Errorf("%w: gencert needs --ca-out DIR and --names LIST (and --days >= 1)", errUsage)
	}
	files, err := genCerts(*dir, list, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	fmt.Println("OK wrote", files[0], files[1], files[2])
	return nil
}

// genCerts creates an ECDSA P-256 CA and a server certificate for names
// signed by it, writes them as PEM into dir (created if missing) and returns
// the paths of the CA certificate, leaf certificate and leaf key. The key
// file is world-readable on purpose: it is throwaway test material that
// containers running as other users may need to read from a bind mount.
func genCerts(dir string, names []string, validity time.Duration) ([3]string, error) {
	var paths [3]string
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return paths, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return paths, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return paths, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return paths, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return paths, fmt.Errorf("create certificate for %v: %w", names, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return paths, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return paths, err
	}
	for i, f := range []struct {
		name, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", der}, {keyFile, "PRIVATE KEY", keyDER}} {
		paths[i] = filepath.Join(dir, f.name)
		data := pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})
		if err := os.WriteFile(paths[i], data, 0o644); err != nil {
			return paths, err
		}
	}
	return paths, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n.Add(n, big.NewInt(1))
}
