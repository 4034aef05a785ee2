package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"vak/internal/testenv/testnet"
)

func TestGenCerts(t *testing.T) {
	paths, err := genCerts(t.TempDir(), []string{"a.test", "b.test", "10.1.2.3"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(paths[0])
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	pair, err := tls.LoadX509KeyPair(paths[1], paths[2])
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, name := range []string{"a.test", "b.test", "10.1.2.3"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("leaf does not verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "c.test"}); err == nil {
		t.Error("leaf verifies for a name it was not issued for")
	}
	block, _ := pem.Decode(caPEM)
	ca, _ := x509.ParseCertificate(block.Bytes)
	if ca.Subject.CommonName != caCommonName || leaf.Subject.CommonName != "a.test" {
		t.Errorf("CNs: CA %q, leaf %q", ca.Subject.CommonName, leaf.Subject.CommonName)
	}
}

// startTestUpstream runs the upstream role on loopback with a fresh CA and
// returns it with a client that trusts the CA and dials every name to it.
func startTestUpstream(t *testing.T) (*upstream, *http.Client) {
	t.Helper()
	dir := t.TempDir()
	paths, err := genCerts(dir, []string{"allowed.test"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	u, err := startUpstream(upstreamConfig{
		Cert: paths[1], Key: paths[2],
		TLS: []string{"127.0.0.1:0"}, HTTP: []string{"127.0.0.1:0"}, Control: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Error(err)
		}
	})
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(paths[0])
	pool.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return u, &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func port(a net.Addr) int { return a.(*net.TCPAddr).Port }

func TestUpstream(t *testing.T) {
	u, client := startTestUpstream(t)
	https := fmt.Sprintf("https://allowed.test:%d", port(u.TLSAddrs[0]))
	plain := fmt.Sprintf("http://plain.test:%d", port(u.HTTPAddrs[0]))
	binary := []byte{0xff, 0xfe, 0, 1}
	tests := []struct {
		name, method, url string
		body              []byte
		status            int
		check             func(t *testing.T, e testnet.Echo, raw []byte)
	}{
		{"echo over h2", "GET", https + "/hello?x=1&y=2", nil, 200, func(t *testing.T, e testnet.Echo, _ []byte) {
			if e.Method != "GET" || e.Host != fmt.Sprintf("allowed.test:%d", port(u.TLSAddrs[0])) || e.Path != "/hello" || e.RawQuery != "x=1&y=2" {
				t.Errorf("echo: %+v", e)
			}
			if !e.TLS || e.ServerName != "allowed.test" || e.ALPN != "h2" || e.Proto != "HTTP/2.0" || e.TLSVersion == "" {
				t.Errorf("TLS facts: %+v", e)
			}
			if got := e.Headers["X-Test"]; len(got) != 1 || got[0] != "yes" {
				t.Errorf("header X-Test: %v", e.Headers)
			}
		}},
		{"utf-8 body", "POST", https + "/post", []byte("héllo"), 200, func(t *testing.T, e testnet.Echo, _ []byte) {
			if e.Body != "héllo" || e.BodyBase64 != "" {
				t.Errorf("body: %+v", e)
			}
		}},
		{"binary body", "PUT", https + "/put", binary, 200, func(t *testing.T, e testnet.Echo, _ []byte) {
			if e.Body != "" || e.BodyBase64 != "//4AAQ==" {
				t.Errorf("body: %+v", e)
			}
		}},
		{"status", "GET", https + "/status/418", nil, 418, func(t *testing.T, e testnet.Echo, _ []byte) {
			if e.Path != "/status/418" {
				t.Errorf("echo: %+v", e)
			}
		}},
		{"status 204 has no body", "GET", https + "/status/204", nil, 204, func(t *testing.T, _ testnet.Echo, raw []byte) {
			if len(raw) != 0 {
				t.Errorf("body %q", raw)
			}
		}},
		{"bad status", "GET", https + "/status/99", nil, 400, nil},
		{"bytes", "GET", https + "/bytes/100000", nil, 200, func(t *testing.T, _ testnet.Echo, raw []byte) {
			if len(raw) != 100000 {
				t.Errorf("got %d bytes", len(raw))
			}
		}},
		{"sink does not echo", "POST", https + "/sink", []byte("secret-value"), 200, func(t *testing.T, _ testnet.Echo, raw []byte) {
			if bytes.Contains(raw, []byte("secret")) || !bytes.Contains(raw, []byte(`"id"`)) {
				t.Errorf("sink answered %s", raw)
			}
		}},
		{"plain http", "GET", plain + "/p", nil, 200, func(t *testing.T, e testnet.Echo, _ []byte) {
			if e.TLS || e.Proto != "HTTP/1.1" || e.Host != fmt.Sprintf("plain.test:%d", port(u.HTTPAddrs[0])) {
				t.Errorf("echo: %+v", e)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tc.url, bytes.NewReader(tc.body))
			req.Header.Set("X-Test", "yes")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
			}
			if tc.check == nil {
				return
			}
			var e testnet.Echo
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				if err := json.Unmarshal(raw, &e); err != nil {
					t.Fatalf("decode %s: %v", raw, err)
				}
			}
			tc.check(t, e, raw)
		})
	}

	// The control port saw them all (the two 400s are not recorded), and
	// the sink's body is there.
	ctl := fmt.Sprintf("http://%s", u.ControlAddr)
	var reqs testnet.Requests
	getJSON(t, "GET", ctl+"/requests", &reqs)
	if want := int64(len(tests) - 1); reqs.Count != want || len(reqs.Requests) != int(want) {
		t.Fatalf("control: count %d (%d listed), want %d", reqs.Count, len(reqs.Requests), want)
	}
	var sawSink bool
	for _, e := range reqs.Requests {
		sawSink = sawSink || (e.Path == "/sink" && e.Body == "secret-value")
	}
	if !sawSink {
		t.Errorf("control does not list the sink request: %+v", reqs.Requests)
	}
	var old testnet.Requests
	getJSON(t, "POST", ctl+"/reset", &old)
	getJSON(t, "GET", ctl+"/requests", &reqs)
	if old.Count != int64(len(tests)-1) || reqs.Count != 0 || len(reqs.Requests) != 0 {
		t.Errorf("reset: returned %d, then %+v", old.Count, reqs)
	}
}

func getJSON(t *testing.T, method, url string, v any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s: %s", method, url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a port free for both TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := port(l.Addr())
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		l.Close()
		if err == nil {
			pc.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

func TestCanary(t *testing.T) {
	dnsP := freePort(t)
	c, err := startCanary(canaryConfig{
		Bind: "127.0.0.1", TCP: []int{0, dnsP}, UDP: []int{0, dnsP}, DNS: []int{dnsP},
		Control: "127.0.0.1:0", Answer: net.IPv4(10, 9, 8, 7), ICMP: false,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	tcpP, udpP := port(c.TCPAddrs[0]), c.UDPAddrs[0].(*net.UDPAddr).Port
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }

	// A TCP connection that speaks HTTP gets a 200.
	resp, err := http.Get("http://" + addr(tcpP) + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "canary\n" {
		t.Errorf("HTTP to the canary: %d %q", resp.StatusCode, body)
	}
	// A bare TCP connect counts too.
	conn, err := net.Dial("tcp", addr(tcpP))
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	// A UDP datagram gets a reply.
	uc, err := net.Dial("udp", addr(udpP))
	if err != nil {
		t.Fatal(err)
	}
	uc.Write([]byte("x"))
	uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	if n, err := uc.Read(buf); err != nil || string(buf[:n]) != "canary\n" {
		t.Errorf("UDP reply %q, %v", buf[:n], err)
	}
	uc.Close()
	// DNS over UDP and TCP gets an A record.
	for _, network := range []string{"udp", "tcp"} {
		m := new(mdns.Msg)
		m.SetQuestion("leak.example.", mdns.TypeA)
		r, _, err := (&mdns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(m, addr(dnsP))
		if err != nil {
			t.Fatalf("DNS over %s: %v", network, err)
		}
		if len(r.Answer) != 1 || r.Answer[0].(*mdns.A).A.String() != "10.9.8.7" {
			t.Errorf("DNS over %s answered %v", network, r.Answer)
		}
	}

	// The canary counts a connection when it accepts it, which may be
	// after the client has moved on: wait until all seven are in.
	var got testnet.Counts
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got = testnet.Counts{}
		getJSON(t, "GET", "http://"+c.ControlAddr.String()+"/counts", &got)
		if len(got.Recent) >= 7 || time.Now().After(deadline) {
			break
		}
	}
	want := map[string]int64{
		fmt.Sprintf("tcp/%d", tcpP): 2, fmt.Sprintf("udp/%d", udpP): 1,
		fmt.Sprintf("tcp/%d", dnsP): 1, fmt.Sprintf("udp/%d", dnsP): 1, fmt.Sprintf("dns/%d", dnsP): 2,
	}
	if got.TCP != 3 || got.UDP != 2 || got.DNS != 2 || got.ICMP != 0 || got.Total != 5 || fmt.Sprint(got.ByPort) != fmt.Sprint(want) {
		t.Errorf("counts %+v, want tcp 3 udp 2 dns 2 total 5 by_port %v", got, want)
	}
	if len(got.Recent) != 7 || got.Recent[len(got.Recent)-1].Name != "leak.example A" {
		t.Errorf("recent events: %+v", got.Recent)
	}
	if got.ICMPError == "" {
		t.Error("ICMP is off but icmp_error is empty")
	}
	var old, after testnet.Counts
	getJSON(t, "POST", "http://"+c.ControlAddr.String()+"/reset", &old)
	getJSON(t, "GET", "http://"+c.ControlAddr.String()+"/counts", &after)
	got = after
	if old.Total != 5 || got.Total != 0 || len(got.ByPort) != 0 || len(got.Recent) != 0 || got.ICMPError == "" {
		t.Errorf("reset: returned %+v, then %+v", old, got)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"gencert"},
		{"gencert", "--ca-out", t.TempDir()},
		{"upstream", "--listen", ":443"},
		{"upstream", "--bogus"},
		{"canary", "--tcp", "0"},
		{"canary", "--no-default-ports"},
		{"canary", "--answer", "::1"},
		{"canary", "extra"},
	} {
		var err error
		switch args[0] {
		case "gencert":
			err = runGencert(args[1:])
		case "upstream":
			err = runUpstream(t.Context(), args[1:])
		case "canary":
			err = runCanary(t.Context(), args[1:])
		}
		if err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
}
