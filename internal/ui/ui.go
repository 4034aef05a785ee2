// Package ui is `vak ui`: a page on loopback that shows what the gateways
// decide as it happens, the requests they hold for an answer (asks) with
// buttons to answer them, the rules, the sessions and the receipts logs
// with their verification status.
//
// The page is one of the channels that answer asks, so it is guarded as
// one: it listens on loopback only; every request must come from a process
// of the page's own user (on Linux, read from the kernel's socket table);
// its Host header must name the listener itself (a DNS-rebinding page
// names its own host); it must carry the per-start random token (given in
// the address vak prints, then held in a SameSite=Strict cookie); and a
// state-changing request must also carry the token in a header the page
// sets and an Origin header naming the page, so no other page the browser
// shows can answer for the user. The assets are embedded: no build step,
// nothing fetched from elsewhere, and a Content-Security-Policy that runs
// no inline script. The agent's values (hosts, paths) are shown as text,
// never as markup.
//
// No sandbox reaches the page: native proxied runs have their own network
// namespace, docker-backed ones a network with only their gateway, and the
// gateways refuse loopback destinations.
package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"vak/internal/egress/asks"
)

// Gateway is a gateway the page follows.
type Gateway struct {
	// Name labels it on the page and in the API ("native" for the
	// on-demand gateway of native proxied runs): letters, digits, '-'.
	Name string
	// Socket is its admin socket, or Follow follows its asks (a gateway
	// container's, through the engine); Workspace is the workspace it
	// serves, when it serves one.
	Socket    string
	Workspace string
	Follow    func(ctx context.Context, fn func(asks.Event) error) error
}

// Rule is one rule of the network policy, as the page shows it.
type Rule struct {
	Name    string `json:"name"`
	Action  string `json:"action"`
	Proto   string `json:"proto"`
	Hosts   string `json:"hosts"`
	Methods string `json:"methods,omitempty"`
	Ports   string `json:"ports,omitempty"`
	Paths   string `json:"paths,omitempty"`
}

// Rules is the policy the gateways decide by.
type Rules struct {
	// File is the config file they come from.
	File string `json:"file"`
	Mode string `json:"mode"`
	Ask  bool   `json:"ask"`
	// Rules in the order they are tried (the first match decides).
	Rules []Rule `json:"rules"`
}

// Session is a running session or workspace environment.
type Session struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
	Backend   string `json:"backend"`
	Network   string `json:"network"`
	State     string `json:"state"`
	Created   string `json:"created,omitempty"`
}

// Options configure Serve.
type Options struct {
	// Listen is the address, on loopback (default 127.0.0.1:0: a free
	// port).
	Listen string
	// Gateways are the gateways whose asks the page shows and answers;
	// Discover, when set, finds more every few seconds (those of running
	// docker-backed workspaces), and a gateway it no longer finds goes.
	Gateways []Gateway
	Discover func(context.Context) ([]Gateway, error)
	// ReceiptsDirs are searched (recursively) for receipts logs, which
	// the page lists with their verification status and whose new records
	// it shows as live decisions.
	ReceiptsDirs []string
	// ReceiptsKeyFile is the gateways' receipts public key, which checks
	// the logs' signatures; while it does not exist (no gateway has run
	// yet) the hash chains are checked.
	ReceiptsKeyFile string
	// Rules and Sessions report the policy and the running sessions
	// (either may be nil).
	Rules    func() (Rules, error)
	Sessions func(context.Context) ([]Session, error)
	// Answer answers ask id of gw: allow (with scope, or always: also a
	// rule in the user config) or deny (always: a deny rule); it returns
	// a line saying what was done.
	Answer func(ctx context.Context, gw Gateway, id string, allow, always bool, scope asks.Scope) (string, error)
	// OwnerUID is the only user whose processes may use the page
	// (default: this process's).
	OwnerUID *int
	// Ready receives the page's address, token included, once it listens.
	Ready func(url string)
	// Log receives one line per refused request and per answer (nil:
	// discarded).
	Log io.Writer
	// Poll is how often the receipts logs are checked for new records
	// (default 200 ms), DiscoverEvery how often Discover runs (default 3 s).
	Poll, DiscoverEvery time.Duration
}

// ErrNotLoopback: Listen is not a loopback address.
var ErrNotLoopback = errors.New("ui: the page listens on loopback only")

//go:embed assets
var assets embed.FS

// Serve serves the page until ctx ends.
func Serve(ctx context.Context, o Options) error {
	if errPeerCheck != nil {
		return errPeerCheck
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return fmt.Errorf("ui: --listen %q: %w", o.Listen, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: --listen %q (use 127.0.0.1:PORT or [::1]:PORT)", ErrNotLoopback, o.Listen)
	}
	l, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	s, err := newServer(o, l.Addr().(*net.TCPAddr))
	if err != nil {
		l.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.hub.run(ctx)
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       s.connContext,
	}
	if o.Ready != nil {
		o.Ready(s.url())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = srv.Shutdown(sctx)
		return nil
	case err := <-errc:
		return fmt.Errorf("ui: %w", err)
	}
}

// server is the page's handler.
type server struct {
	o     Options
	addr  *net.TCPAddr
	token string
	// hosts are the Host headers that name this listener.
	hosts  map[string]bool
	owner  int
	mux    *http.ServeMux
	hub    *hub
	index  []byte // the page, with this start's token
	cookie string
}

func newServer(o Options, addr *net.TCPAddr) (*server, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("ui: token: %w", err)
	}
	s := &server{o: o, addr: addr, token: hex.EncodeToString(b), owner: os.Getuid()}
	if o.OwnerUID != nil {
		s.owner = *o.OwnerUID
	}
	port := fmt.Sprint(addr.Port)
	s.hosts = map[string]bool{net.JoinHostPort(addr.IP.String(), port): true, "localhost:" + port: true}
	s.cookie = "vak_ui_" + port
	// (No html/template: the token is hex, and the template package's
	// initialisers would cost every vak process at start.)
	idx, err := assets.ReadFile("assets/index.html")
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	s.index = bytes.ReplaceAll(idx, []byte("{{.Token}}"), []byte(s.token))
	s.hub = newHub(o)
	s.routes()
	return s, nil
}

// url is the address to open: the token is in it.
func (s *server) url() string {
	return "http://" + net.JoinHostPort(s.addr.IP.String(), fmt.Sprint(s.addr.Port)) + "/?token=" + s.token
}

type peerKey struct{}

// connContext records who is at the other end of a connection, once.
func (s *server) connContext(ctx context.Context, c net.Conn) context.Context {
	uid, err := peerUID(c)
	if err != nil {
		uid = -1
	}
	return context.WithValue(ctx, peerKey{}, uid)
}

// ServeHTTP checks every request (refuse), then routes it.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	if why, status := s.refuse(r); why != "" {
		s.logf("refused %s %s from %s: %s", r.Method, oneLine(r.URL.Path), r.RemoteAddr, why)
		http.Error(w, "vak ui: "+why, status)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// refuse is why r is refused ("": it is not) and the status to answer.
func (s *server) refuse(r *http.Request) (string, int) {
	if uid, _ := r.Context().Value(peerKey{}).(int); uid != s.owner {
		return fmt.Sprintf("this page belongs to uid %d; the connection is not from one of its processes", s.owner), http.StatusForbidden
	}
	if !s.hosts[strings.ToLower(r.Host)] {
		return fmt.Sprintf("Host %q does not name this page (open the address vak ui printed)", oneLine(r.Host)), http.StatusMisdirectedRequest
	}
	if r.Method == http.MethodGet && r.URL.Path == "/" && r.URL.Query().Has("token") {
		if !s.tokenOK(r.URL.Query().Get("token")) {
			return "wrong token (open the address vak ui printed; each start has a new one)", http.StatusForbidden
		}
		return "", 0 // exchanged for the cookie (index)
	}
	c, err := r.Cookie(s.cookie)
	if err != nil || !s.tokenOK(c.Value) {
		return "no token (open the address vak ui printed; each start has a new one)", http.StatusForbidden
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			return "a request from another site", http.StatusForbidden
		}
		return "", 0
	}
	// A change: the page's own script sends it, from the page.
	if o := r.Header.Get("Origin"); o != "http://"+r.Host {
		return fmt.Sprintf("Origin %q is not this page", oneLine(o)), http.StatusForbidden
	}
	if !s.tokenOK(r.Header.Get("X-Vak-Token")) {
		return "no token header", http.StatusForbidden
	}
	return "", 0
}

func (s *server) tokenOK(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.token)) == 1
}

func (s *server) routes() {
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /{$}", s.serveIndex)
	s.mux.HandleFunc("GET /app.js", s.asset("assets/app.js", "text/javascript; charset=utf-8"))
	s.mux.HandleFunc("GET /app.css", s.asset("assets/app.css", "text/css; charset=utf-8"))
	s.mux.HandleFunc("GET /api/state", s.serveState)
	s.mux.HandleFunc("GET /api/events", s.serveEvents)
	s.mux.HandleFunc("POST /api/asks/{gateway}/{id}/{verb}", s.serveAnswer)
}

func (s *server) serveIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		// Into the cookie, and out of the address bar and history.
		http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: s.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(s.index)
}

func (s *server) asset(name, ctype string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := assets.ReadFile(name)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", ctype)
		w.Write(b)
	}
}

// state is GET /api/state.
type state struct {
	Gateways []gatewayState   `json:"gateways"`
	Rules    *Rules           `json:"rules,omitempty"`
	Sessions []Session        `json:"sessions"`
	Receipts []receiptsLog    `json:"receipts"`
	Errors   []string         `json:"errors,omitempty"`
	Asks     []gatewayAskView `json:"asks"`
}

func (s *server) serveState(w http.ResponseWriter, r *http.Request) {
	st := state{Gateways: s.hub.gatewayStates(), Asks: s.hub.pending(), Sessions: []Session{}}
	if s.o.Rules != nil {
		if rs, err := s.o.Rules(); err != nil {
			st.Errors = append(st.Errors, "rules: "+err.Error())
		} else {
			st.Rules = &rs
		}
	}
	if s.o.Sessions != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		list, err := s.o.Sessions(ctx)
		cancel()
		if err != nil {
			st.Errors = append(st.Errors, "sessions: "+err.Error())
		} else if list != nil {
			st.Sessions = list
		}
	}
	logs, err := s.hub.receiptsLogs()
	if err != nil {
		st.Errors = append(st.Errors, "receipts: "+err.Error())
	}
	st.Receipts = logs
	writeJSON(w, http.StatusOK, st)
}

// serveEvents streams live decisions and asks as server-sent events.
func (s *server) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	backlog, ch, cancel := s.hub.subscribe()
	defer cancel()
	send := func(e event) bool {
		b, _ := json.Marshal(e.Data)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.Kind, b); err != nil {
			return false
		}
		return true
	}
	for _, e := range backlog {
		if !send(e) {
			return
		}
	}
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case e, ok := <-ch:
			if !ok || !send(e) {
				return
			}
			fl.Flush()
		case <-keep.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// serveAnswer is POST /api/asks/GATEWAY/ID/allow?scope=once|run|always
// and .../deny[?scope=always].
func (s *server) serveAnswer(w http.ResponseWriter, r *http.Request) {
	gw, ok := s.hub.gateway(r.PathValue("gateway"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no gateway %q", oneLine(r.PathValue("gateway")))})
		return
	}
	scope := asks.Scope(r.URL.Query().Get("scope"))
	var allow bool
	switch r.PathValue("verb") {
	case "allow":
		allow = true
		if scope != asks.Once && scope != asks.Run && scope != asks.Always {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "scope: want once, run or always"})
			return
		}
	case "deny":
		if scope != "" && scope != asks.Always {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "scope: a deny is for the waiting requests, or always"})
			return
		}
	default:
		http.NotFound(w, r)
		return
	}
	if s.o.Answer == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "this page cannot answer"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	id := r.PathValue("id")
	msg, err := s.o.Answer(ctx, gw, id, allow, scope == asks.Always, scope)
	if err != nil {
		s.logf("answer %s %s of %s: %v", r.PathValue("verb"), oneLine(id), gw.Name, err)
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	s.logf("%s", msg)
	writeJSON(w, http.StatusOK, map[string]string{"done": msg})
}

func (s *server) logf(format string, args ...any) {
	if s.o.Log != nil {
		fmt.Fprintf(s.o.Log, "vak ui: "+format+"\n", args...)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// oneLine is s without control characters, at most 200 bytes: for logs
// and messages that quote a request.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
