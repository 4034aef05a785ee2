package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The floor relay: the least a TLS-intercepting proxy written in Go does for
// one keep-alive request, in a process of its own like the others. It
// answers CONNECT, terminates the client's TLS with a certificate for the
// bench host, checks the host (the one rule), substitutes the placeholder
// in Authorization (the one secret) and relays request and response over one
// kept TLS connection upstream, with net/http's parser and writer. No
// receipts, no other policy, no limits: whatever vak costs above this is
// its own.

const relayPlaceholder = "RELAY_PLACEHOLDER_BENCH_TOKEN"

// startRelay re-executes this program as the floor relay.
func startRelay(dir string, upPort int, cert tls.Certificate, caPEM string, pool *x509.CertPool) *proxyProc {
	certFile, keyFile := filepath.Join(dir, "relay.crt"), filepath.Join(dir, "relay.key")
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		log.Fatal(err)
	}
	os.WriteFile(certFile, chain, 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	port := freePort()
	cmd := exec.Command(self, "-relay-serve", "127.0.0.1:"+strconv.Itoa(port))
	cmd.Env = append(os.Environ(), "RELAY_CERT="+certFile, "RELAY_KEY="+keyFile, "RELAY_UPSTREAM_CA="+caPEM, "RELAY_UPSTREAM=127.0.0.1:"+strconv.Itoa(upPort))
	cmd.Env = append(cmd.Env, vakEnv...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	waitPort("127.0.0.1:" + strconv.Itoa(port))
	return &proxyProc{cmd: cmd, addr: "127.0.0.1:" + strconv.Itoa(port), caPool: pool, placeholder: relayPlaceholder}
}

// serveRelay is -relay-serve ADDR.
func serveRelay(addr string) {
	cert, err := tls.LoadX509KeyPair(os.Getenv("RELAY_CERT"), os.Getenv("RELAY_KEY"))
	if err != nil {
		log.Fatal(err)
	}
	caB, err := os.ReadFile(os.Getenv("RELAY_UPSTREAM_CA"))
	if err != nil {
		log.Fatal(err)
	}
	upPool := x509.NewCertPool()
	upPool.AppendCertsFromPEM(caB)
	up := os.Getenv("RELAY_UPSTREAM")
	server := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	client := &tls.Config{RootCAs: upPool, ServerName: benchHost, NextProtos: []string{"http/1.1"}}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relayConn(c, server, client, up)
	}
}

func relayConn(c net.Conn, server, client *tls.Config, up string) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	host, _, _ := net.SplitHostPort(req.Host)
	if host != benchHost {
		fmt.Fprint(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
		return
	}
	if _, err := fmt.Fprint(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	tc := tls.Server(c, server)
	if err := tc.Handshake(); err != nil {
		return
	}
	cr, cw := bufio.NewReader(tc), bufio.NewWriter(tc)
	var uc *tls.Conn
	var ur *bufio.Reader
	var uw *bufio.Writer
	defer func() {
		if uc != nil {
			uc.Close()
		}
	}()
	for {
		req, err := http.ReadRequest(cr)
		if err != nil {
			return
		}
		if h, _, _ := strings.Cut(req.Host, ":"); h != benchHost {
			return
		}
		if a := req.Header.Get("Authorization"); strings.Contains(a, relayPlaceholder) {
			req.Header.Set("Authorization", strings.ReplaceAll(a, relayPlaceholder, secretValue))
		}
		if uc == nil {
			if uc, err = tls.Dial("tcp", up, client); err != nil {
				return
			}
			ur, uw = bufio.NewReader(uc), bufio.NewWriter(uc)
		}
		if err := req.Write(uw); err != nil {
			return
		}
		if err := uw.Flush(); err != nil {
			return
		}
		resp, err := http.ReadResponse(ur, req)
		if err != nil {
			return
		}
		err = resp.Write(cw)
		resp.Body.Close()
		if err != nil || cw.Flush() != nil {
			return
		}
	}
}
