package mcp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"vak/internal/peercred"
	"vak/internal/worker/wire"
)

// ErrListen is wrapped by errors about a --listen address.
var ErrListen = errors.New("invalid listen address")

// Listener is where the streamable HTTP transport is served, and how its
// clients are authenticated.
type Listener struct {
	net.Listener
	// URL is the endpoint clients use (http://127.0.0.1:PORT/mcp, or
	// http://localhost/mcp over the unix socket).
	URL string
	// Token is the bearer token every request must carry (TCP); empty for a
	// unix socket, where the peer's uid is checked instead.
	Token string
	// Socket is the unix socket's path (removed by Close).
	Socket string
}

// Listen opens addr for the HTTP transport: "unix:PATH" (or an absolute
// path) is a unix socket that only this uid may open (mode 0600, and every
// connection's peer uid is checked); anything else must be a loopback
// host:port, served with a fresh bearer token.
func Listen(addr string) (*Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok || strings.HasPrefix(addr, "/") {
		if !ok {
			path = addr
		}
		return listenUnix(path)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w %q: want 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:PATH: %w", ErrListen, addr, err)
	}
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("%w %q: only loopback addresses are served (the tools run commands); use a unix socket or a tunnel to reach it from elsewhere", ErrListen, addr)
		}
	} else {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		ln.Close()
		return nil, err
	}
	return &Listener{Listener: ln, URL: "http://" + ln.Addr().String() + "/mcp", Token: hex.EncodeToString(b[:])}, nil
}

func listenUnix(path string) (*Listener, error) {
	if _, err := peercred.UID(nil); errors.Is(err, errors.ErrUnsupported) {
		return nil, fmt.Errorf("%w %q: %w", ErrListen, path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%w %q: exists and is not a socket", ErrListen, path)
		}
		// A socket left by a server that is gone; one that answers is in use.
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w %q: another server is listening there", ErrListen, path)
		}
		os.Remove(path)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return &Listener{Listener: ln, URL: "http://localhost/mcp", Socket: path}, nil
}

type peerKey struct{}

// peerResult is what ConnContext learned about a unix peer.
type peerResult struct {
	uid int
	err error
}

// HTTPHandler is the streamable HTTP transport of s behind l's
// authentication: a request without the bearer token (TCP) or from another
// uid (unix socket) gets 401 or 403 and reaches nothing.
func (s *Server) HTTPHandler(l *Listener) http.Handler {
	opts := &sdk.StreamableHTTPOptions{
		Logger: s.sdkLog,
		// The request limit of stdio and of the worker: a larger body
		// gets 413 Request Entity Too Large.
		MaxRequestBodyBytes: wire.MaxRequestBytes,
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, opts)
	if l.Socket != "" {
		return requirePeer(os.Getuid(), h, s)
	}
	return requireBearer(l.Token, h, s)
}

func requireBearer(token string, next http.Handler, s *Server) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			s.opts.Log.Warn("refused an HTTP request without the bearer token", "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="vak mcp"`)
			http.Error(w, "vak mcp: missing or wrong bearer token (it was printed when the server started)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func requirePeer(uid int, next http.Handler, s *Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(peerResult)
		if r.Context().Value(peerKey{}) == nil || p.err != nil || p.uid != uid {
			s.opts.Log.Warn("refused a unix socket peer", "peer_uid", p.uid, "err", p.err)
			http.Error(w, fmt.Sprintf("vak mcp: peer uid %d is not the server's uid %d", p.uid, uid), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ServeHTTP serves h on l until ctx ends.
func ServeHTTP(ctx context.Context, l *Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if _, ok := c.(*net.UnixConn); !ok {
				return ctx
			}
			uid, err := peercred.UID(c)
			return context.WithValue(ctx, peerKey{}, peerResult{uid: uid, err: err})
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if l.Socket != "" {
		os.Remove(l.Socket)
	}
	return nil
}
