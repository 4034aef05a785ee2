package ca

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLoadOrCreate(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	a, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
	if !a.Certificate().IsCA || a.Certificate().PublicKeyAlgorithm != x509.ECDSA {
		t.Fatal("not an ECDSA CA")
	}
	// Second load returns the same CA.
	b, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint() != b.Fingerprint() {
		t.Fatal("CA changed between loads")
	}
	// The exported PEM holds the certificate only.
	if p := string(a.CertPEM()); len(p) == 0 || strings.Contains(p, "PRIVATE") {
		t.Fatal("CertPEM exports a key or nothing")
	}
	// An insecure key is refused.
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); !errors.Is(err, ErrInsecureKey) {
		t.Fatalf("insecure key: %v", err)
	}
	// A lone certificate is refused rather than silently replaced.
	os.Remove(filepath.Join(dir, KeyFile))
	if _, err := LoadOrCreate(dir); err == nil {
		t.Fatal("certificate without key accepted")
	}
}

func TestLeaf(t *testing.T) {
	t.Parallel()
	a, err := NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(a.Certificate())
	var wg sync.WaitGroup
	certs := make([]*x509.Certificate, 8)
	for i := range certs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.Leaf("api.example.com")
			if err != nil {
				t.Error(err)
				return
			}
			certs[i] = c.Leaf
		}()
	}
	wg.Wait()
	for _, c := range certs[1:] {
		if c != certs[0] {
			t.Fatalf("concurrent mints of one name were not de-duplicated: %p %p %v %v", c, certs[0], c.SerialNumber, certs[0].SerialNumber)
		}
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: pool}); err != nil {
		t.Fatal(err)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: pool}); err == nil {
		t.Fatal("leaf valid for another name")
	}
	ipc, err := a.Leaf("10.1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ipc.Leaf.Verify(x509.VerifyOptions{DNSName: "10.1.2.3", Roots: pool}); err != nil {
		t.Fatal(err)
	}
	// Expiring leaves are re-minted.
	a.now = func() time.Time { return time.Now().Add(LeafValidity) }
	c2, _ := a.Leaf("api.example.com")
	if c2.Leaf == certs[0] {
		t.Fatal("expiring leaf served from cache")
	}
	// The cache is bounded.
	a.max = 3
	for _, n := range []string{"a.test", "b.test", "c.test", "d.test"} {
		if _, err := a.Leaf(n); err != nil {
			t.Fatal(err)
		}
	}
	if a.lru.Len() != 3 {
		t.Fatalf("cache holds %d", a.lru.Len())
	}
}
