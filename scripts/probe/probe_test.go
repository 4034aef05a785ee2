//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	mdns "github.com/miekg/dns"

	"vak/internal/egress/egresstest"
	"vak/internal/testenv"
	"vak/internal/testenv/testnet"
)

// runProbe runs the probe binary with env added to a clean environment and
// returns its stdout and exit code.
func runProbe(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(testenv.Probe(t), args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "SSL_CERT_DIR=/nonexistent", "SSL_CERT_FILE=/nonexistent"}, env...)
	out, err := cmd.Output()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return string(out), 0
}

// echoHandler answers with what it saw.
var echoHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	sni := ""
	if r.TLS != nil {
		sni = r.TLS.ServerName
	}
	b, _ := io.ReadAll(r.Body)
	json.NewEncoder(w).Encode(map[string]string{
		"host": r.Host, "sni": sni, "x": r.Header.Get("X-Probe"), "method": r.Method, "body": string(b), "url": r.URL.String(),
	})
})

func TestHTTPAndTLS(t *testing.T) {
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	up := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.1", 0), ca, echoHandler, "allowed.test", "127.0.0.1")
	trust := []string{"SSL_CERT_FILE=" + caFile}
	base := fmt.Sprintf("https://127.0.0.1:%d", up.Port())

	// An explicit proxy: absolute-form requests and CONNECT (to the upstream
	// whatever the name).
	var proxied atomic.Int64
	proxy := egresstest.StartPlain(t, egresstest.Listen(t, "127.0.0.1", 0), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		if r.Method != http.MethodConnect {
			fmt.Fprintf(w, "proxied %s", r.URL)
			return
		}
		up, err := net.Dial("tcp", up.Listener.Addr().String())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
		conn, brw, _ := http.NewResponseController(w).Hijack()
		go func() { io.Copy(up, brw); up.Close() }()
		io.Copy(conn, up)
		conn.Close()
	}))
	proxyURL := "http://" + proxy.Listener.Addr().String()

	tests := []struct {
		name  string
		env   []string
		args  []string
		code  int
		wants []string
	}{
		{"tls verifies against SSL_CERT_FILE", trust, []string{"tls", base + "/x"}, 0,
			[]string{`OK 200 issuer="egresstest upstream CA" subject="allowed.test" proto=HTTP/2.0 body={`, `"url":"/x"`}},
		{"tls fails without the CA", nil, []string{"tls", base + "/x"}, 1, []string{"FAIL ", "certificate"}},
		{"tls needs https", nil, []string{"tls", "http://127.0.0.1:1/"}, 2, nil},
		{"http verifies too", nil, []string{"http", base + "/x"}, 1, []string{"FAIL ", "certificate"}},
		{"http headers and Host", trust, []string{"http", "-H", "X-Probe: v1", "--host", "spoofed.test", base + "/h", "5s"}, 0,
			[]string{"OK 200 {", `"host":"spoofed.test"`, `"x":"v1"`}},
		{"http Host via -H", trust, []string{"http", "-H", "Host: h2.test", base}, 0, []string{`"host":"h2.test"`}},
		{"http POST body", trust, []string{"http", "-d", "payload", base}, 0, []string{`"method":"POST"`, `"body":"payload"`}},
		{"http --sni turns verification off", nil, []string{"http", "--sni", "other.test", base}, 0,
			[]string{"OK 200 verify=off sni=other.test {", `"sni":"other.test"`}},
		{"http honours HTTP_PROXY", []string{"HTTP_PROXY=" + proxyURL}, []string{"http", "http://upstream.test/p"}, 0,
			[]string{"OK 200 proxied http://upstream.test/p"}},
		{"tls honours HTTPS_PROXY", append([]string{"HTTPS_PROXY=" + proxyURL}, trust...),
			[]string{"tls", fmt.Sprintf("https://allowed.test:%d/c", up.Port())}, 0,
			[]string{`OK 200 issuer="egresstest upstream CA"`, `"sni":"allowed.test"`}},
		{"http bad flag", nil, []string{"http", "--nope", base}, 2, nil},
		{"http bad header", nil, []string{"http", "-H", "novalue", base}, 2, nil},
		{"bad timeout", nil, []string{"connect", "127.0.0.1:1", "soon"}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runProbe(t, tc.env, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, out)
			}
			if tc.code != 2 && strings.Count(out, "\n") != 1 {
				t.Errorf("want one result line, got %q", out)
			}
			for _, w := range tc.wants {
				if !strings.Contains(out, w) {
					t.Errorf("output %q lacks %q", out, w)
				}
			}
		})
	}
	if proxied.Load() != 2 {
		t.Errorf("proxy saw %d requests, want 2", proxied.Load())
	}
}

func TestBench(t *testing.T) {
	ca := egresstest.NewCA(t)
	caFile := ca.WritePEM(t, t.TempDir())
	up := egresstest.StartTLS(t, egresstest.Listen(t, "127.0.0.1", 0), ca, echoHandler, "127.0.0.1")
	url := fmt.Sprintf("https://127.0.0.1:%d/", up.Port())
	for _, http1 := range []bool{false, true} {
		args := []string{"bench", url, "60", "3"}
		if http1 {
			args = append([]string{"bench", "--http1"}, args[1:]...)
		}
		out, code := runProbe(t, []string{"SSL_CERT_FILE=" + caFile}, args...)
		var b testnet.Bench
		if code != 0 || json.Unmarshal([]byte(strings.TrimPrefix(out, "OK ")), &b) != nil {
			t.Fatalf("bench: exit %d: %s", code, out)
		}
		proto := map[bool]string{false: "HTTP/2.0", true: "HTTP/1.1"}[http1]
		if b.N != 60 || b.Concurrency != 3 || b.Errors != 0 || b.Proto != proto || b.MedianMS <= 0 ||
			b.P90MS < b.MedianMS || b.P99MS < b.P90MS || b.RPS <= 0 {
			t.Errorf("bench (http1=%v) not sane: %+v", http1, b)
		}
		// Warm-up (3) plus measured (60) requests.
		if got := up.Hits.Swap(0); got != 63 {
			t.Errorf("upstream served %d requests, want 63", got)
		}
	}
	// Without the CA every request fails: FAIL, JSON still printed.
	out, code := runProbe(t, nil, "bench", url, "5", "2")
	if code != 1 || !strings.HasPrefix(out, "FAIL {") || !strings.Contains(out, `"errors":5`) {
		t.Errorf("unverifiable bench: exit %d: %s", code, out)
	}
	if _, code := runProbe(t, nil, "bench", url, "0", "1"); code != 2 {
		t.Errorf("bench N=0: exit %d, want 2", code)
	}
}

func TestDNSAndQUIC(t *testing.T) {
	mux := mdns.NewServeMux()
	mux.HandleFunc(".", func(w mdns.ResponseWriter, q *mdns.Msg) {
		r := new(mdns.Msg)
		r.SetReply(q)
		if q.Question[0].Name == "ok.test." {
			r.Answer = append(r.Answer, &mdns.A{Hdr: mdns.RR_Header{Name: "ok.test.", Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 5}, A: net.IPv4(10, 0, 0, 1)})
		} else {
			r.Rcode = mdns.RcodeNameError
		}
		w.WriteMsg(r)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*mdns.Server{{PacketConn: pc, Handler: mux}, {Listener: l, Handler: mux}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	// A silent UDP port and one that answers.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	answering, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer answering.Close()
	var quicSize atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := answering.ReadFrom(buf)
			if err != nil {
				return
			}
			quicSize.Store(int64(n))
			answering.WriteTo([]byte("hi"), from)
		}
	}()

	tests := []struct {
		args  []string
		code  int
		wants string
	}{
		{[]string{"dns", "ok.test", pc.LocalAddr().String()}, 0, "OK NOERROR A 10.0.0.1 from udp/"},
		{[]string{"dns", "--tcp", "ok.test", l.Addr().String()}, 0, "OK NOERROR A 10.0.0.1 from tcp/"},
		{[]string{"dns", "nope.test", pc.LocalAddr().String()}, 1, "FAIL rcode=NXDOMAIN answers=0"},
		{[]string{"dns", "ok.test", silent.LocalAddr().String(), "300ms"}, 1, "FAIL "},
		{[]string{"dns", "--type", "MX", "ok.test", "127.0.0.1"}, 2, ""},
		{[]string{"quic", silent.LocalAddr().String(), "300ms"}, 1, "timeout"},
		{[]string{"quic", answering.LocalAddr().String()}, 0, "OK reply 2 bytes"},
	}
	for _, tc := range tests {
		out, code := runProbe(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.wants) {
			t.Errorf("probe %q: exit %d, output %q; want exit %d and %q", tc.args, code, out, tc.code, tc.wants)
		}
	}
	if n := quicSize.Load(); n != quicInitialSize {
		t.Errorf("QUIC probe datagram was %d bytes, want %d", n, quicInitialSize)
	}
}
