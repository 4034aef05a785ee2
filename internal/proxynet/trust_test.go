package proxynet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pkcs12 "software.sslmate.com/src/go-pkcs12"

	"vak/internal/catrust"
	"vak/internal/config"
	"vak/internal/egress/egressconfig"
)

func testCA(t *testing.T, isCA bool) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vak test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestWriteTrust(t *testing.T) {
	dir := t.TempDir()
	ca := testCA(t, true)
	other := testCA(t, true)
	if err := WriteTrust(dir, ca, other); err != nil {
		t.Fatal(err)
	}
	bundle, _ := os.ReadFile(filepath.Join(dir, catrust.BundleFile))
	certs, err := parseCerts(bundle)
	if err != nil || len(certs) != 2 {
		t.Fatalf("bundle holds %d certs: %v", len(certs), err)
	}
	caOnly, _ := os.ReadFile(filepath.Join(dir, catrust.CAFile))
	if c, _ := parseCerts(caOnly); len(c) != 1 || c[0].Subject.CommonName != "vak test CA" {
		t.Fatalf("CA file: %s", caOnly)
	}
	store, _ := os.ReadFile(filepath.Join(dir, catrust.StoreFile))
	tc, err := pkcs12.DecodeTrustStore(store, catrust.StorePass)
	if err != nil || len(tc) != 2 {
		t.Fatalf("trust store: %d certs, %v", len(tc), err)
	}
	for _, f := range []string{catrust.CAFile, catrust.BundleFile, catrust.StoreFile} {
		fi, _ := os.Stat(filepath.Join(dir, f))
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s mode %v", f, fi.Mode())
		}
		data, _ := os.ReadFile(filepath.Join(dir, f))
		if strings.Contains(string(data), "PRIVATE KEY") {
			t.Errorf("%s contains a private key", f)
		}
	}
	// Refusals: not a CA, garbage, two certificates.
	for _, bad := range [][]byte{testCA(t, false), []byte("junk"), append(ca, ca...)} {
		if err := WriteTrust(t.TempDir(), bad, nil); err == nil {
			t.Error("accepted a bad CA")
		}
	}
}

func TestTrustEnv(t *testing.T) {
	env := strings.Join(catrust.Env(catrust.Dir), "\n")
	for _, k := range []string{"SSL_CERT_FILE=", "NODE_EXTRA_CA_CERTS=", "REQUESTS_CA_BUNDLE=", "CURL_CA_BUNDLE=", "GIT_SSL_CAINFO=", "PIP_CERT=", "JAVA_TOOL_OPTIONS=-Djavax.net.ssl.trustStore="} {
		if !strings.Contains(env, k+catrust.Dir) && !strings.Contains(env, k) {
			t.Errorf("missing %s", k)
		}
	}
}

// sectionsOf decodes a trusted config file the way vak does (config.Load)
// and returns its gateway sections, as the CLI hands them to Ensure.
func sectionsOf(t *testing.T, file string) *egressconfig.Sections {
	t.Helper()
	cfg, err := config.Load(config.Options{UserFile: file})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.EgressSections
}

// WriteTrust skips the work when the files were written from the same
// inputs, and writes them again when an input changed or a file is gone.
func TestWriteTrustOnlyWhenChanged(t *testing.T) {
	dir := t.TempDir()
	ca, other := testCA(t, true), testCA(t, true)
	ino := func(name string) uint64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	if err := WriteTrust(dir, ca, nil); err != nil {
		t.Fatal(err)
	}
	first := ino(catrust.BundleFile)
	if err := WriteTrust(dir, ca, nil); err != nil {
		t.Fatal(err)
	}
	if ino(catrust.BundleFile) != first {
		t.Error("the same inputs wrote the bundle again")
	}
	// Control: another system bundle writes the files again.
	if err := WriteTrust(dir, ca, other); err != nil {
		t.Fatal(err)
	}
	if ino(catrust.BundleFile) == first {
		t.Error("a changed system bundle did not write the bundle again")
	}
	if certs, _ := parseCerts(mustRead(t, filepath.Join(dir, catrust.BundleFile))); len(certs) != 2 {
		t.Errorf("bundle holds %d certs after the change, want 2", len(certs))
	}
	// Another CA: the CA file is the new one.
	if err := WriteTrust(dir, other, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := parseCerts(mustRead(t, filepath.Join(dir, catrust.CAFile)))
	want, _ := parseCerts(other)
	if len(got) != 1 || !got[0].Equal(want[0]) {
		t.Error("a changed CA did not replace the CA file")
	}
	// A file removed by hand comes back with the same inputs.
	os.Remove(filepath.Join(dir, catrust.StoreFile))
	if err := WriteTrust(dir, other, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, catrust.StoreFile)); err != nil {
		t.Errorf("removed trust store not written again: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
