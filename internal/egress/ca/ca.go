// Package ca is the gateway's per-installation certificate authority. The CA
// is an ECDSA P-256 key and a self-signed certificate created on first use in
// vak's state directory: the key file is 0600 and never leaves that
// directory (no sandbox ever mounts it); only the certificate is exported, to
// be trusted inside sandboxes. Leaf certificates for intercepted names are
// minted on demand, one per name (or IP), and cached.
package ca

import (
	"container/list"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File names inside the CA directory.
const (
	KeyFile  = "gateway-ca.key"
	CertFile = "gateway-ca.crt"
)

// Validity periods.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	LeafValidity = 30 * 24 * time.Hour
	// leafRenewBefore re-mints a cached leaf this long before it expires.
	leafRenewBefore = 24 * time.Hour
	// DefaultCacheSize bounds the leaf cache.
	DefaultCacheSize = 1024
)

// ErrInsecureKey means the CA key file is readable or writable by others.
var ErrInsecureKey = errors.New("ca: key file is accessible to other users")

// Authority mints leaf certificates signed by the CA.
type Authority struct {
	cert    *x509.Certificate
	certDER []byte
	key     crypto.Signer
	leafKey *ecdsa.PrivateKey // shared by all leaves of this process

	mu    sync.Mutex
	cache map[string]*list.Element
	lru   *list.List
	max   int
	// inflight de-duplicates concurrent minting of the same name.
	inflight map[string]*mintCall
	now      func() time.Time
}

type cacheEntry struct {
	name string
	cert *tls.Certificate
}

type mintCall struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// LoadOrCreate loads the CA from dir, creating it (key 0600, cert 0644) if
// neither file exists. It refuses a key file others can access and a
// directory where only one of the two files exists.
func LoadOrCreate(dir string) (*Authority, error) {
	keyPath, certPath := filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile)
	_, kerr := os.Stat(keyPath)
	_, cerr := os.Stat(certPath)
	switch {
	case errors.Is(kerr, os.ErrNotExist) && errors.Is(cerr, os.ErrNotExist):
		if err := create(dir, keyPath, certPath); err != nil {
			return nil, err
		}
	case kerr != nil || cerr != nil:
		return nil, fmt.Errorf("ca: %s: need both %s and %s: %w", dir, KeyFile, CertFile, errors.Join(kerr, cerr))
	}
	return load(keyPath, certPath)
}

func create(dir, keyPath, certPath string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("ca: generate key: %w", err)
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject: pkix.Name{
			CommonName:   "vak gateway CA",
			Organization: []string{"vak"},
			// Distinguishes installations in trust stores.
			OrganizationalUnit: []string{fmt.Sprintf("%s uid %d", host, os.Getuid())},
		},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("ca: create certificate: %w", err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	// Write the key with O_EXCL so a concurrent first start cannot clobber
	// it, then the certificate.
	kf, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	if err := pem.Encode(kf, &pem.Block{Type: "PRIVATE KEY", Bytes: kb}); err != nil {
		kf.Close()
		os.Remove(keyPath)
		return fmt.Errorf("ca: write key: %w", err)
	}
	if err := kf.Close(); err != nil {
		return fmt.Errorf("ca: write key: %w", err)
	}
	tmp := certPath + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("ca: write certificate: %w", err)
	}
	if err := os.Rename(tmp, certPath); err != nil {
		return fmt.Errorf("ca: write certificate: %w", err)
	}
	return nil
}

func load(keyPath, certPath string) (*Authority, error) {
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v (want 0600)", ErrInsecureKey, keyPath, fi.Mode().Perm())
	}
	kpem, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	kb, _ := pem.Decode(kpem)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("ca: %s: no PKCS#8 PEM private key", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ca: %s: %w", keyPath, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("ca: %s: key type %T cannot sign", keyPath, k)
	}
	cpem, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	cb, _ := pem.Decode(cpem)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("ca: %s: no PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ca: %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("ca: %s is not a CA certificate", certPath)
	}
	if !publicKeysEqual(cert.PublicKey, signer.Public()) {
		return nil, fmt.Errorf("ca: %s does not belong to %s", certPath, keyPath)
	}
	return New(cert, signer)
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ae, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ae.Equal(b)
}

// New builds an Authority from a CA certificate and its key (tests use an
// in-memory CA).
func New(cert *x509.Certificate, key crypto.Signer) (*Authority, error) {
	lk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: leaf key: %w", err)
	}
	return &Authority{
		cert:     cert,
		certDER:  cert.Raw,
		key:      key,
		leafKey:  lk,
		cache:    map[string]*list.Element{},
		lru:      list.New(),
		max:      DefaultCacheSize,
		inflight: map[string]*mintCall{},
		now:      time.Now,
	}, nil
}

// NewEphemeral creates an in-memory CA (tests and benchmarks).
func NewEphemeral() (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: "vak ephemeral test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return New(cert, key)
}

func randSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("ca: crypto/rand failed: " + err.Error())
	}
	return n
}

// Certificate is the CA certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.cert }

// CertPEM is the CA certificate in PEM form, for export into sandboxes.
func (a *Authority) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.certDER})
}

// Fingerprint is the SHA-256 of the CA certificate, hex.
func (a *Authority) Fingerprint() string {
	s := sha256.Sum256(a.certDER)
	return fmt.Sprintf("%x", s)
}

// Leaf returns a certificate for name (a normalised DNS name or an IP
// literal), from the cache or freshly minted.
func (a *Authority) Leaf(name string) (*tls.Certificate, error) {
	if name == "" {
		return nil, errors.New("ca: empty name")
	}
	now := a.now()
	a.mu.Lock()
	if el, ok := a.cache[name]; ok {
		e := el.Value.(*cacheEntry)
		l := e.cert.Leaf
		renew := min(leafRenewBefore, l.NotAfter.Sub(l.NotBefore)/4)
		if now.Add(renew).Before(l.NotAfter) {
			a.lru.MoveToFront(el)
			a.mu.Unlock()
			return e.cert, nil
		}
		a.lru.Remove(el)
		delete(a.cache, name)
	}
	if c, ok := a.inflight[name]; ok {
		a.mu.Unlock()
		<-c.done
		return c.cert, c.err
	}
	call := &mintCall{done: make(chan struct{})}
	a.inflight[name] = call
	a.mu.Unlock()

	call.cert, call.err = a.mint(name, now)

	a.mu.Lock()
	delete(a.inflight, name)
	if call.err == nil {
		a.cache[name] = a.lru.PushFront(&cacheEntry{name: name, cert: call.cert})
		for a.lru.Len() > a.max {
			old := a.lru.Back()
			a.lru.Remove(old)
			delete(a.cache, old.Value.(*cacheEntry).name)
		}
	}
	a.mu.Unlock()
	close(call.done)
	return call.cert, call.err
}

func (a *Authority) mint(name string, now time.Time) (*tls.Certificate, error) {
	notAfter := now.Add(LeafValidity)
	if notAfter.After(a.cert.NotAfter) {
		notAfter = a.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		tmpl.IPAddresses = []net.IP{net.IP(ip.AsSlice())}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &a.leafKey.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("ca: mint %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: mint %s: %w", name, err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, a.certDER},
		PrivateKey:  a.leafKey,
		Leaf:        leaf,
	}, nil
}
