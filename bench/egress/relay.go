package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
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
	"sync"
	"time"

	"vak/internal/egress/policy"
	"vak/internal/egress/secrets"
)

// The floor relay: the least a TLS-intercepting proxy written in Go does for
// one keep-alive request, in a process of its own like the others. It
// answers CONNECT, terminates the client's TLS with a certificate for the
// bench host, checks the host (the one rule), substitutes the placeholder
// in Authorization (the one secret) and relays request and response over one
// kept TLS connection upstream, with net/http's parser and writer. No
// receipts, no other policy, no limits: whatever vak costs above this is
// its own.
//
// The second floor, "floor relay + records", is the same relay keeping the
// record vak's design promises for every request (docs/receipts.md): after
// the response is flushed to the client, one JSON line per request, chained
// to the previous line by its SHA-256, reaches the file in one write(2);
// and at most every 5 ms a goroutine signs the newest record's hash with
// Ed25519 and appends the checkpoint to a second file. What vak costs above
// this one is everything but the record it promises.

const relayPlaceholder = "RELAY_PLACEHOLDER_BENCH_TOKEN"

// relayFloor is which floor a relay process is.
type relayFloor int

const (
	floorPlain   relayFloor = iota // the floor relay
	floorRecords                   // + records
	floorChecks                    // + records + checks (checks.go)
)

// startRelay re-executes this program as the floor relay of the given
// kind; its records go under dir.
func startRelay(dir string, upPort int, cert tls.Certificate, caPEM string, pool *x509.CertPool, kind relayFloor) *proxyProc {
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
	if kind >= floorRecords {
		cmd.Env = append(cmd.Env, "RELAY_RECORDS="+filepath.Join(dir, "relay-records-"+strconv.Itoa(port)+".jsonl"))
	}
	placeholder := relayPlaceholder
	if kind == floorChecks {
		// The checks floor substitutes a placeholder of vak's form.
		placeholder = secrets.NewPlaceholder()
		cmd.Env = append(cmd.Env, "RELAY_CHECKS_PLACEHOLDER="+placeholder)
	}
	cmd.Env = append(cmd.Env, vakEnv...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	waitPort("127.0.0.1:" + strconv.Itoa(port))
	return &proxyProc{cmd: cmd, addr: "127.0.0.1:" + strconv.Itoa(port), caPool: pool, placeholder: placeholder}
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
	var rec *recordLog
	if p := os.Getenv("RELAY_RECORDS"); p != "" {
		rec = openRecordLog(p)
	}
	var checks *relayChecks
	if ph := os.Getenv("RELAY_CHECKS_PLACEHOLDER"); ph != "" {
		_, port, err := net.SplitHostPort(up)
		if err != nil {
			log.Fatal(err)
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			log.Fatal(err)
		}
		checks = newRelayChecks(ph, uint16(n))
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relayConn(c, server, client, up, rec, checks)
	}
}

// recordLog is the records floor's log: a hash-chained JSON line per
// request, written when the request ends, and an Ed25519 checkpoint of the
// newest hash at most every 5 ms while there are unsigned records.
type recordLog struct {
	mu       sync.Mutex
	f, sigf  *os.File
	buf      []byte
	seq      uint64
	prev     [64]byte // hex SHA-256 of the previous line
	unsigned bool
}

func openRecordLog(path string) *recordLog {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	sigf, err := os.OpenFile(path+".sig", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		log.Fatal(err)
	}
	l := &recordLog{f: f, sigf: sigf}
	hex.Encode(l.prev[:], make([]byte, 32))
	go func() {
		for range time.Tick(5 * time.Millisecond) {
			l.mu.Lock()
			due, seq, hash := l.unsigned, l.seq, string(l.prev[:])
			l.unsigned = false
			l.mu.Unlock()
			if !due {
				continue
			}
			sig := ed25519.Sign(key, fmt.Appendf(nil, "checkpoint seq=%d hash=%s", seq, hash))
			l.sigf.Write(fmt.Appendf(nil, `{"seq":%d,"hash":%q,"sig":%q}`+"\n", seq, hash, base64.StdEncoding.EncodeToString(sig)))
		}
	}()
	return l
}

// add writes one request's record (the fields a vak receipt has).
func (l *recordLog) add(req *http.Request, path string, status int, out, in int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	b := l.buf[:0]
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, l.seq, 10)
	b = append(b, `,"time":"`...)
	b = time.Now().UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","session":"bench","client":"127.0.0.1","protocol":"https","method":`...)
	b = strconv.AppendQuote(b, req.Method)
	b = append(b, `,"host":`...)
	b = strconv.AppendQuote(b, benchHost)
	b = append(b, `,"port":443,"path":`...)
	b = strconv.AppendQuote(b, path)
	b = append(b, `,"rule":0,"rule_name":"bench","decision":"allow","status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"bytes_out":`...)
	b = strconv.AppendInt(b, out, 10)
	b = append(b, `,"bytes_in":`...)
	b = strconv.AppendInt(b, in, 10)
	b = append(b, `,"secrets":["TOKEN"],"prev":"`...)
	b = append(b, l.prev[:]...)
	b = append(b, `"}`...)
	sum := sha256.Sum256(b)
	hex.Encode(l.prev[:], sum[:])
	b = append(b, '\n')
	l.buf = b
	if _, err := l.f.Write(b); err != nil {
		log.Fatal(err)
	}
	l.unsigned = true
}

// relayConn serves one client connection: its CONNECT, the TLS handshake,
// then its requests one at a time (relayRequests).
func relayConn(c net.Conn, server, client *tls.Config, up string, rec *recordLog, checks *relayChecks) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect {
		return
	}
	// The tunnel's host and port: the checks floor parses them as vak
	// does, and its requests' Host headers must name them.
	var host policy.Host
	var port uint16
	var ok bool
	if checks != nil {
		host, port, err = policy.ParseAuthority(req.Host, 443)
		ok = err == nil && host.Name == benchHost
	} else {
		h, _, _ := net.SplitHostPort(req.Host)
		ok = h == benchHost
	}
	if !ok {
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
	relayRequests(tc, client, up, rec, checks, host, port)
}

// relayRequests relays the requests of one intercepted connection over one
// kept upstream connection; with checks, the checks floor's checks apply
// (and the tunnel's host and port are what the Host header must name).
func relayRequests(tc *tls.Conn, client *tls.Config, up string, rec *recordLog, checks *relayChecks, host policy.Host, port uint16) {
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
		path, stopWatch := req.URL.Path, func() bool { return true }
		if checks != nil {
			if path, stopWatch, err = checks.request(req, host, port); err != nil {
				log.Print(err)
				return
			}
		} else {
			if h, _, _ := strings.Cut(req.Host, ":"); h != benchHost {
				return
			}
			if a := req.Header.Get("Authorization"); strings.Contains(a, relayPlaceholder) {
				req.Header.Set("Authorization", strings.ReplaceAll(a, relayPlaceholder, secretValue))
			}
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
		stopWatch()
		if err != nil {
			return
		}
		if checks != nil {
			if err := checks.response(resp); err != nil {
				log.Print(err)
				return
			}
		}
		err = resp.Write(cw)
		resp.Body.Close()
		if err != nil || cw.Flush() != nil {
			return
		}
		if rec != nil {
			rec.add(req, path, resp.StatusCode, req.ContentLength, resp.ContentLength)
		}
	}
}
