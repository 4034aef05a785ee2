package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"vak/internal/egress/egresstest"
)

// rawUpstream is a plain-HTTP upstream whose connection handling the test
// controls: it counts accepted connections and answers each request with
// respond(n, req), n counting requests on that connection from 1.
type rawUpstream struct {
	l       net.Listener
	accepts atomic.Int64
	respond func(n int, r *http.Request) (resp string, closeAfter bool)
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func startRawUpstream(t *testing.T, respond func(n int, r *http.Request) (string, bool)) *rawUpstream {
	u := &rawUpstream{l: egresstest.Listen(t, upstreamIP, 0), respond: respond}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := u.l.Accept()
			if err != nil {
				return
			}
			u.accepts.Add(1)
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, r.Body)
					resp, closeAfter := u.respond(n, r)
					if _, err := io.WriteString(c, resp); err != nil || closeAfter {
						return
					}
				}
			}()
		}
	}()
	// The gateway may still hold idle connections: close them from here.
	t.Cleanup(func() {
		u.l.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) port() int { return u.l.Addr().(*net.TCPAddr).Port }

func okResponse(body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// TestDirectUpstream checks the direct HTTP/1.1 path for requests without
// a body: connections are reused, a connection the server closed while idle
// is replaced for idempotent requests only, informational responses are
// skipped, oversized response heads are refused, and a policy change drops
// pooled connections.
func TestDirectUpstream(t *testing.T) {
	hugeHead := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\nContent-Length: 2\r\n\r\nok"
	tests := []struct {
		name    string
		respond func(n int, r *http.Request) (string, bool)
		// methods are sent in order over one client connection.
		methods    []string
		wantStatus []int
		wantBody   []string
		// wantAccepts is how many upstream connections were opened.
		wantAccepts  int64
		policyChange bool
	}{
		{
			name: "keep-alive reuses one upstream connection",
			respond: func(n int, r *http.Request) (string, bool) {
				if r.Method == http.MethodHead {
					return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", false
				}
				return okResponse(fmt.Sprint("r", n)), false
			},
			methods:     []string{"GET", "GET", "HEAD", "GET"},
			wantStatus:  []int{200, 200, 200, 200},
			wantBody:    []string{"r1", "r2", "", "r4"},
			wantAccepts: 1,
		},
		{
			name: "idle connection closed by the server: GET is sent again",
			// Answers without "Connection: close", then hangs up.
			respond:     func(n int, r *http.Request) (string, bool) { return okResponse("x"), true },
			methods:     []string{"GET", "GET", "GET"},
			wantStatus:  []int{200, 200, 200},
			wantBody:    []string{"x", "x", "x"},
			wantAccepts: 3,
		},
		{
			// POST (not idempotent) goes through the Transport, which
			// notices the idle close before sending.
			name: "idle connection closed by the server: POST takes a fresh connection",
			respond: func(n int, r *http.Request) (string, bool) {
				return okResponse("x"), true
			},
			methods:     []string{"GET", "POST"},
			wantStatus:  []int{200, 200},
			wantBody:    []string{"x", "x"},
			wantAccepts: 2,
		},
		{
			name: "informational responses are skipped",
			respond: func(n int, r *http.Request) (string, bool) {
				return "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n" + okResponse("final"), false
			},
			methods:     []string{"GET", "GET"},
			wantStatus:  []int{200, 200},
			wantBody:    []string{"final", "final"},
			wantAccepts: 1,
		},
		{
			name:        "oversized response head is refused",
			respond:     func(n int, r *http.Request) (string, bool) { return hugeHead, true },
			methods:     []string{"GET"},
			wantStatus:  []int{502},
			wantAccepts: 1,
		},
		{
			name:         "policy change drops pooled connections",
			respond:      func(n int, r *http.Request) (string, bool) { return okResponse("p"), false },
			methods:      []string{"GET", "GET"},
			wantStatus:   []int{200, 200},
			wantBody:     []string{"p", "p"},
			wantAccepts:  2,
			policyChange: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			up := startRawUpstream(t, tc.respond)
			h.pol.Store(h.policyFromTOML(fmt.Sprintf(`
[[network.rules]]
hosts = ["allowed.test"]
cidrs = ["127.0.0.2/32"]
methods = ["GET", "HEAD", "POST"]
ports = [%d]
`, up.port())))
			c := h.client(false)
			for i, m := range tc.methods {
				if tc.policyChange && i > 0 {
					h.p.PolicyChanged()
				}
				status, body, _ := get(t, c, m, fmt.Sprintf("http://allowed.test:%d/d%d", up.port(), i), nil, nil)
				if status != tc.wantStatus[i] {
					t.Fatalf("request %d (%s): status %d, want %d (body %q)", i, m, status, tc.wantStatus[i], body)
				}
				if tc.wantBody != nil && status == 200 && body != tc.wantBody[i] {
					t.Fatalf("request %d (%s): body %q, want %q", i, m, body, tc.wantBody[i])
				}
			}
			if got := up.accepts.Load(); got != tc.wantAccepts {
				t.Fatalf("upstream connections: %d, want %d", got, tc.wantAccepts)
			}
		})
	}
}
