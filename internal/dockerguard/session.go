package dockerguard

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// BuildKit sessions of denied builds.
//
// The docker CLI's BuildKit path (20.10's classic CLI and buildx alike, on
// moby/buildkit's session.Session) runs a build's POST /session and its
// POST /build side by side and closes the session when the build fails.
// Session.Close is a no-op until Session.Run has started, and a Run that
// starts after it dials /session and serves it until the daemon hangs up,
// which it never does: a build the guard denies at once (its answer comes
// back before the client's session goroutine has run) left `docker build`
// hanging forever, seen in CI. So when the guard denies a build (or the
// engine refuses one) it ends that build's session itself: it closes the
// session's connection if it is open, and if the session comes later it
// answers the upgrade and hangs up at once. A refusal would do, but the CLI
// would then report "unable to upgrade to h2c, received 403" instead of the
// build's own error; an upgraded session that ends makes the session's side
// return without an error, so the user sees why the build was denied.

// deniedSessionTTL is how long the guard remembers a denied build's session
// ID (the race above is over in well under a second); maxDeniedSessions
// bounds what an agent can make it remember.
const (
	deniedSessionTTL  = 5 * time.Minute
	maxDeniedSessions = 1024
)

// sessionHeader carries a BuildKit session's ID on POST /session; POST
// /build names it in its "session" query parameter.
const sessionHeader = "X-Docker-Expose-Session-Uuid"

// buildSessions tracks open /session connections by session ID and the IDs
// of denied builds.
type buildSessions struct {
	mu     sync.Mutex
	open   map[string]map[*sessionConn]struct{}
	denied map[string]time.Time
	order  []denial // denied's entries, oldest first
	now    func() time.Time
}

type denial struct {
	id string
	t  time.Time
}

func newBuildSessions() *buildSessions {
	return &buildSessions{open: map[string]map[*sessionConn]struct{}{}, denied: map[string]time.Time{}, now: time.Now}
}

// deny records that the build of session id was denied and closes the
// session's open connections.
func (s *buildSessions) deny(id string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	now := s.now()
	// Oldest first: expired denials, then as many as the bound needs.
	for len(s.order) > 0 && (now.Sub(s.order[0].t) > deniedSessionTTL || len(s.denied) >= maxDeniedSessions) {
		if d := s.order[0]; s.denied[d.id] == d.t {
			delete(s.denied, d.id)
		}
		s.order = s.order[1:]
	}
	s.denied[id] = now
	s.order = append(s.order, denial{id, now})
	conns := s.open[id]
	delete(s.open, id)
	s.mu.Unlock()
	for c := range conns {
		c.end()
	}
}

// isDenied reports whether the build of session id was denied.
func (s *buildSessions) isDenied(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deniedLocked(id)
}

// deniedLocked is isDenied with s.mu held.
func (s *buildSessions) deniedLocked(id string) bool {
	t, ok := s.denied[id]
	return ok && s.now().Sub(t) <= deniedSessionTTL
}

// track registers the hijacked connection of session id: closed at once if
// its build was denied meanwhile, else when it is.
func (s *buildSessions) track(id string, c net.Conn) net.Conn {
	sc := &sessionConn{Conn: c}
	s.mu.Lock()
	if s.deniedLocked(id) {
		s.mu.Unlock()
		sc.end()
		return sc
	}
	if s.open[id] == nil {
		s.open[id] = map[*sessionConn]struct{}{}
	}
	s.open[id][sc] = struct{}{}
	s.mu.Unlock()
	sc.onClose = func() {
		s.mu.Lock()
		delete(s.open[id], sc)
		if len(s.open[id]) == 0 {
			delete(s.open, id)
		}
		s.mu.Unlock()
	}
	return sc
}

// sessionConn is a hijacked /session connection that leaves the tracker
// when closed.
//
// The guard tracks it from the hijack on, before httputil.ReverseProxy has
// written the engine's 101 to the client: ending it then would cut the
// response short, and the client's dial would fail ("failed to dial gRPC:
// unexpected EOF") instead of its session ending quietly. ReverseProxy
// writes and flushes the 101 before it reads or writes the connection in
// either direction, so end closes it at once if that has begun, else at the
// first read or write.
type sessionConn struct {
	net.Conn
	once    sync.Once
	onClose func()

	mu      sync.Mutex
	started bool // the 101 is out: the copying has begun
	closing bool // end was called before that
}

// end closes the connection once the upgrade's response is out.
func (c *sessionConn) end() {
	c.mu.Lock()
	started := c.started
	c.closing = !started
	c.mu.Unlock()
	if started {
		c.Conn.Close()
	}
}

// begin marks the copying as begun; it reports false, having closed the
// connection, when the session was ended before.
func (c *sessionConn) begin() bool {
	c.mu.Lock()
	c.started = true
	closing := c.closing
	c.closing = false
	c.mu.Unlock()
	if closing {
		c.Conn.Close()
		return false
	}
	return true
}

func (c *sessionConn) Read(p []byte) (int, error) {
	if !c.begin() {
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

func (c *sessionConn) Write(p []byte) (int, error) {
	if !c.begin() {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

func (c *sessionConn) Close() error {
	c.once.Do(func() {
		if c.onClose != nil {
			c.onClose()
		}
	})
	return c.Conn.Close()
}

// endSession answers a BuildKit session's upgrade and closes it: the
// client's session ends without an error (see above).
func endSession(w http.ResponseWriter) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, http.StatusForbidden, deny("the session of a denied build").Error())
		return
	}
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
	brw.Flush()
	c.Close()
}

// hijackHook hands the connection httputil.ReverseProxy hijacks for an
// upgraded response (here: a BuildKit session) to hijacked.
type hijackHook struct {
	http.ResponseWriter
	hijacked func(net.Conn) net.Conn
}

func (h *hijackHook) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return h.hijacked(c), brw, nil
}

// Unwrap lets http.ResponseController reach the server's writer (Flush).
func (h *hijackHook) Unwrap() http.ResponseWriter { return h.ResponseWriter }
