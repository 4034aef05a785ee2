// Package admin is the gateway's control endpoint: HTTP over a unix socket
// (mode 0600 in a 0700 directory, and on Linux only peers with the gateway's
// own uid), never TCP, so nothing on a network — and no sandbox — can reach
// it. It serves status, reload, revoke, the sandbox environment
// (placeholders) and the CA certificate.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"vak/internal/errclass"
)

// Controller is what the admin endpoint controls.
type Controller interface {
	// Status returns a JSON-encodable status report.
	Status() any
	// Reload re-reads configuration and applies it without dropping
	// connections.
	Reload() error
	// Revoke reloads and closes connections the new policy denies.
	Revoke() (closed int, err error)
	// Env is NAME -> placeholder for the sandbox.
	Env() map[string]string
	// CACert is the gateway CA certificate (PEM).
	CACert() []byte
}

// Paths of the API.
const (
	PathStatus = "/v1/status"
	PathReload = "/v1/reload"
	PathRevoke = "/v1/revoke"
	PathEnv    = "/v1/env"
	PathCA     = "/v1/ca"
)

// MaxSocketPath is the longest unix socket path the kernel accepts.
const MaxSocketPath = 107

// ErrInUse means another live gateway answers on the socket.
var ErrInUse = errors.New("admin: socket in use by a running gateway")

// Listen creates the unix socket at path: its directory is created 0700,
// a stale socket is removed, and a socket with a live listener is refused.
func Listen(path string) (net.Listener, error) {
	if len(path) > MaxSocketPath {
		return nil, fmt.Errorf("admin: socket path %s is longer than %d bytes", path, MaxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("admin: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s", ErrInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("admin: remove stale socket: %w", err)
		}
	}
	// Create the socket with no permissions for group and others.
	old := umask(0o177)
	l, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("admin: %w", err)
	}
	return &peerCheckListener{Listener: l}, nil
}

// peerCheckListener drops connections from other users (where the platform
// can tell).
type peerCheckListener struct{ net.Listener }

func (l *peerCheckListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := checkPeer(c); err != nil {
			c.Close()
			continue
		}
		return c, nil
	}
}

// Server serves the admin API.
type Server struct {
	srv *http.Server
}

// Serve serves ctl on l until Close.
func Serve(l net.Listener, ctl Controller) *Server {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(w http.ResponseWriter, err error) {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	}
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, ctl.Status())
	})
	mux.HandleFunc("POST "+PathReload, func(w http.ResponseWriter, r *http.Request) {
		if err := ctl.Reload(); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, 200, map[string]bool{"reloaded": true})
	})
	mux.HandleFunc("POST "+PathRevoke, func(w http.ResponseWriter, r *http.Request) {
		n, err := ctl.Revoke()
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, 200, map[string]int{"closed": n})
	})
	mux.HandleFunc("GET "+PathEnv, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, ctl.Env())
	})
	mux.HandleFunc("GET "+PathCA, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		w.Write(ctl.CACert())
	})
	serveAsks(mux, ctl, writeJSON)
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}}
	go func() { _ = s.srv.Serve(l) }()
	return s
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Client talks to a gateway's admin socket.
type Client struct {
	Socket string
	hc     *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	return &Client{Socket: path, hc: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
}

// ErrNotRunning means nothing listens on the socket; it is of class
// errclass.Unavailable.
var ErrNotRunning = errclass.New(errclass.Unavailable, "admin: no gateway is listening")

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://gateway"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) || strings.Contains(err.Error(), "no such file") {
			return fmt.Errorf("%w on %s: %v", ErrNotRunning, c.Socket, err)
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return statusError(resp.Status, b)
	}
	switch v := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*v = b
		return nil
	default:
		return json.Unmarshal(b, out)
	}
}

// statusError is the error of an answer other than 200 with body b: the
// server's own {"error": ...} message, or the status and body.
func statusError(status string, b []byte) error {
	var e struct{ Error string }
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return errors.New(e.Error)
	}
	return fmt.Errorf("admin: %s: %s", status, strings.TrimSpace(string(b)))
}

// Status returns the status report as raw JSON.
func (c *Client) Status(ctx context.Context) (json.RawMessage, error) {
	var b []byte
	err := c.do(ctx, "GET", PathStatus, &b)
	return b, err
}

// Reload asks the gateway to reload its configuration.
func (c *Client) Reload(ctx context.Context) error {
	return c.do(ctx, "POST", PathReload, nil)
}

// Revoke reloads and closes denied connections; it returns how many.
func (c *Client) Revoke(ctx context.Context) (int, error) {
	var out struct{ Closed int }
	err := c.do(ctx, "POST", PathRevoke, &out)
	return out.Closed, err
}

// Env returns NAME -> placeholder.
func (c *Client) Env(ctx context.Context) (map[string]string, error) {
	var out map[string]string
	err := c.do(ctx, "GET", PathEnv, &out)
	return out, err
}

// CACert returns the gateway CA certificate (PEM).
func (c *Client) CACert(ctx context.Context) ([]byte, error) {
	var b []byte
	err := c.do(ctx, "GET", PathCA, &b)
	return b, err
}
