// Package egresstest holds test fixtures for the egress gateway: a test CA
// for upstream servers, TLS (HTTP/1.1 + HTTP/2) upstreams on chosen loopback
// addresses, canary servers that count every attempt to reach them, and an
// in-memory receipts sink. Everything here runs real sockets and real TLS.
package egresstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"vak/internal/receipts"
)

// CA is a certificate authority for test upstream servers (standing in for
// the public web PKI).
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA creates a test CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "egresstest upstream CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{cert: cert, key: key}
}

// Pool is a cert pool holding the CA.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// PEM is the CA certificate in PEM form.
func (c *CA) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})
}

// WritePEM writes the CA certificate into dir and returns the path.
func (c *CA) WritePEM(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(p, c.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Cert issues a server certificate for names (DNS names or IPs).
func (c *CA) Cert(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
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
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key}
}

// Listen listens on ip:port (port 0: any), failing the test on error.
func Listen(t testing.TB, ip string, port int) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ListenSamePort returns listeners on the same port at each of ips (all on
// the loopback network), retrying until a port is free on all of them.
func ListenSamePort(t testing.TB, ips ...string) []net.Listener {
	t.Helper()
	for range 50 {
		first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		ls := []net.Listener{first}
		ok := true
		for _, ip := range ips[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		if ok {
			return ls
		}
		for _, l := range ls {
			l.Close()
		}
	}
	t.Fatal("no common free port")
	return nil
}

// Server is an upstream test server with a hit counter.
type Server struct {
	*httptest.Server
	Hits atomic.Int64
}

// Port is the server's port.
func (s *Server) Port() int { return s.Listener.Addr().(*net.TCPAddr).Port }

// AddrPort is the server's address.
func (s *Server) AddrPort() netip.AddrPort {
	return s.Listener.Addr().(*net.TCPAddr).AddrPort()
}

// StartTLS serves h with HTTP/2 and HTTP/1.1 over TLS on l with a
// certificate from ca for names. Every request counts as a hit.
func StartTLS(t testing.TB, l net.Listener, ca *CA, h http.Handler, names ...string) *Server {
	t.Helper()
	s := &Server{}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	ts.Listener.Close()
	ts.Listener = l
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Cert(t, names...)}, NextProtos: []string{"h2", "http/1.1"}}
	ts.StartTLS()
	s.Server = ts
	t.Cleanup(ts.Close)
	return s
}

// StartPlain serves h over plain HTTP/1.1 on l.
func StartPlain(t testing.TB, l net.Listener, h http.Handler) *Server {
	t.Helper()
	s := &Server{}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	ts.Listener.Close()
	ts.Listener = l
	ts.Start()
	s.Server = ts
	t.Cleanup(ts.Close)
	return s
}

// Canary is a TCP listener that counts every connection attempt that
// reaches it (and every byte), whatever the protocol.
type Canary struct {
	L        net.Listener
	Accepted atomic.Int64
	Bytes    atomic.Int64
	wg       sync.WaitGroup
}

// StartCanary accepts on l, counting, and closes each connection after
// reading what arrives within a short time.
func StartCanary(t testing.TB, l net.Listener) *Canary {
	t.Helper()
	c := &Canary{L: l}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.Accepted.Add(1)
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer conn.Close()
				conn.SetReadDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 4096)
				for {
					n, err := conn.Read(buf)
					c.Bytes.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); c.wg.Wait() })
	return c
}

// Port is the canary's port.
func (c *Canary) Port() int { return c.L.Addr().(*net.TCPAddr).Port }

// StartEcho serves a TCP echo on l (a non-HTTP upstream).
func StartEcho(t testing.TB, l net.Listener) *Canary {
	t.Helper()
	c := &Canary{L: l}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.Accepted.Add(1)
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					n, err := conn.Read(buf)
					if n > 0 {
						c.Bytes.Add(int64(n))
						if _, werr := conn.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); c.wg.Wait() })
	return c
}

// Sink is an in-memory receipts sink.
type Sink struct {
	mu   sync.Mutex
	recs []receipts.Record
	// Fail, when set, makes Err report a broken log.
	Fail atomic.Bool
}

// Append implements proxy.Sink.
func (s *Sink) Append(r receipts.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
	return nil
}

// Err implements proxy.Sink.
func (s *Sink) Err() error {
	if s.Fail.Load() {
		return fmt.Errorf("test sink failing")
	}
	return nil
}

// Records returns a copy of the receipts so far.
func (s *Sink) Records() []receipts.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.recs)
}

// Find returns receipts matching fn.
func (s *Sink) Find(fn func(receipts.Record) bool) []receipts.Record {
	var out []receipts.Record
	for _, r := range s.Records() {
		if fn(r) {
			out = append(out, r)
		}
	}
	return out
}

// WaitFor polls until some receipt matches fn or the timeout passes.
func (s *Sink) WaitFor(timeout time.Duration, fn func(receipts.Record) bool) (receipts.Record, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if m := s.Find(fn); len(m) > 0 {
			return m[0], true
		}
		if time.Now().After(deadline) {
			return receipts.Record{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
