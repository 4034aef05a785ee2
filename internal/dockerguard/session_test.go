package dockerguard

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// sessionUpstream answers POST /session as the engine does (101, then the
// connection stays open until the client goes) and everything else like
// upstream.
type sessionUpstream struct {
	*upstream
	sessions *sync.Map // session IDs the engine saw
}

func (u sessionUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/build") && r.URL.Query().Get("dockerfile") == "missing" {
		http.Error(w, `{"message":"Cannot locate specified Dockerfile: missing"}`, http.StatusInternalServerError)
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/session") {
		u.upstream.ServeHTTP(w, r)
		return
	}
	u.sessions.Store(r.Header.Get(sessionHeader), true)
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
	brw.Flush()
	io.Copy(io.Discard, brw)
}

// openSession sends POST /session for id on a connection of its own and
// returns the connection (upgraded) or the refusal's status.
func openSession(t *testing.T, sock, id string) (net.Conn, int) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "POST /v1.41/session HTTP/1.1\r\nHost: docker\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n"+sessionHeader+": "+id+"\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		return nil, res.StatusCode
	}
	return c, res.StatusCode
}

// stillOpen reports whether nothing (no EOF) arrives on c for a while.
func stillOpen(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// TestDeniedBuildEndsSession: the BuildKit client's race (session.go). A
// build the guard denies ends its session whichever comes first: an open
// session connection is closed, a later one upgraded and closed at once
// without reaching the engine. Controls: the session of a build the guard
// forwards stays open, and a session with no build yet is upgraded. A build the engine refuses ends its session the same way.
func TestDeniedBuildEndsSession(t *testing.T) {
	e := setup(t)
	// The same guard in front of an engine that upgrades /session.
	raw := e.rawSock + ".s"
	var seen sync.Map
	serve(t, sessionUpstream{e.up, &seen}, raw)
	g, err := New(Policy{Workspace: e.ws, TrustDir: e.trust, Pool: netip.MustParsePrefix("10.213.0.0/16"), DNS: netip.MustParseAddr("172.30.0.2"), GuardSocket: e.sock + ".s"}, raw)
	if err != nil {
		t.Fatal(err)
	}
	sock := e.sock + ".s"
	serve(t, g, sock)
	cl := unixClient(sock)
	build := func(query string) int {
		t.Helper()
		res, err := cl.Post("http://docker/v1.41/build?version=2&remote=client-session&"+query, "application/x-tar", nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}

	t.Run("session first", func(t *testing.T) {
		denied, code := openSession(t, sock, "sess-a")
		if denied == nil {
			t.Fatalf("POST /session: %d, want 101", code)
		}
		allowed, code := openSession(t, sock, "sess-b")
		if allowed == nil {
			t.Fatalf("POST /session: %d, want 101", code)
		}
		if code := build("networkmode=host&session=sess-a"); code != http.StatusForbidden {
			t.Fatalf("build --network host: %d, want 403", code)
		}
		if code := build("session=sess-b"); code != http.StatusOK {
			t.Fatalf("control: a plain build: %d, want 200", code)
		}
		denied.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := denied.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("the denied build's session connection: read %v, want EOF (closed by the guard)", err)
		}
		if !stillOpen(allowed, 300*time.Millisecond) {
			t.Errorf("control: the forwarded build's session was closed")
		}
	})

	t.Run("engine refuses the build", func(t *testing.T) {
		c, code := openSession(t, sock, "sess-e")
		if c == nil {
			t.Fatalf("POST /session: %d, want 101", code)
		}
		if code := build("dockerfile=missing&session=sess-e"); code != http.StatusInternalServerError {
			t.Fatalf("build refused by the engine: %d, want 500", code)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("the refused build's session connection: read %v, want EOF (closed by the guard)", err)
		}
	})

	t.Run("build first", func(t *testing.T) {
		if code := build("networkmode=host&session=sess-c"); code != http.StatusForbidden {
			t.Fatalf("build --network host: %d, want 403", code)
		}
		c, code := openSession(t, sock, "sess-c")
		if c == nil {
			t.Fatalf("the denied build's late session: %d, want 101 (then closed)", code)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("the denied build's late session: read %v, want EOF (closed by the guard)", err)
		}
		if _, ok := seen.Load("sess-c"); ok {
			t.Errorf("the denied build's late session reached the engine")
		}
		if _, ok := seen.Load("sess-a"); !ok {
			t.Errorf("control: an open session did not reach the engine")
		}
		if c, code := openSession(t, sock, "sess-d"); c == nil {
			t.Errorf("control: another session: %d, want 101", code)
		}
	})
}

// TestBuildSessionsBounded: what an agent can make the guard remember is
// bounded, and forgotten after the TTL.
func TestBuildSessionsBounded(t *testing.T) {
	s := newBuildSessions()
	now := time.Unix(1e9, 0)
	s.now = func() time.Time { return now }
	for i := 0; i < 3*maxDeniedSessions; i++ {
		s.deny(strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String())
	}
	if n := len(s.denied); n > maxDeniedSessions {
		t.Errorf("%d denied sessions remembered, want at most %d", n, maxDeniedSessions)
	}
	s.deny("last")
	if !s.isDenied("last") {
		t.Fatal("the latest denial was forgotten")
	}
	now = now.Add(deniedSessionTTL + time.Second)
	if s.isDenied("last") {
		t.Error("a denial older than the TTL still counts")
	}
}
