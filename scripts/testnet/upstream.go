package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"vak/internal/testenv/testnet"
)

// maxEchoBody is how much of a request body the upstream reads and echoes.
const maxEchoBody = 1 << 20

// maxBytes bounds GET /bytes/N.
const maxBytes = 1 << 34

type upstreamConfig struct {
	Cert, Key string
	// TLS and HTTP are the addresses of the HTTPS and plain HTTP listeners.
	TLS, HTTP []string
	// Control is the control API's address ("" for none).
	Control string
}

func runUpstream(ctx context.Context, args []string) error {
	fs := newFlags("upstream")
	var cfg upstreamConfig
	fs.StringVar(&cfg.Cert, "cert", "", "PEM certificate (chain) for the HTTPS listeners")
	fs.StringVar(&cfg.Key, "key", "", "PEM private key for --cert")
	listen := fs.String("listen", ":443", "comma-separated HTTPS listen addresses (\"\" for none)")
	plain := fs.String("http", ":80", "comma-separated plain HTTP listen addresses (\"\" for none)")
	fs.StringVar(&cfg.Control, "control", fmt.Sprintf(":%d", testnet.DefaultControlPort), "control API address (\"\" for none)")
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg.TLS, cfg.HTTP = splitList(*listen), splitList(*plain)
	if len(cfg.TLS) > 0 && (cfg.Cert == "" || cfg.Key == "") {
		return fmt.Errorf("%w: upstream needs --cert and --key for its HTTPS listeners (or --listen \"\")", errUsage)
	}
	if len(cfg.TLS)+len(cfg.HTTP) == 0 {
		return fmt.Errorf("%w: upstream needs at least one of --listen and --http", errUsage)
	}
	u, err := startUpstream(cfg)
	if err != nil {
		return err
	}
	fmt.Println(u.ready)
	<-ctx.Done()
	return u.Close()
}

// upstream is a running upstream role.
type upstream struct {
	group
	rec   recorder
	ready string
	// Addrs of the HTTPS, plain HTTP and control listeners, as bound.
	TLSAddrs, HTTPAddrs []net.Addr
	ControlAddr         net.Addr
}

func startUpstream(cfg upstreamConfig) (u *upstream, err error) {
	u = &upstream{}
	defer func() {
		if err != nil {
			u.Close()
		}
	}()
	var tlsConf *tls.Config
	if len(cfg.TLS) > 0 {
		cert, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("load --cert %s / --key %s: %w", cfg.Cert, cfg.Key, err)
		}
		tlsConf = &tls.Config{
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"h2", "http/1.1"},
		}
	}
	listen := func(addr string) (net.Listener, error) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		u.add(l)
		return l, nil
	}
	for _, a := range cfg.TLS {
		l, err := listen(a)
		if err != nil {
			return nil, err
		}
		srv := newServer(u)
		srv.TLSConfig = tlsConf.Clone()
		u.TLSAddrs = append(u.TLSAddrs, l.Addr())
		u.serveHTTP(l, srv)
	}
	for _, a := range cfg.HTTP {
		l, err := listen(a)
		if err != nil {
			return nil, err
		}
		u.HTTPAddrs = append(u.HTTPAddrs, l.Addr())
		u.serveHTTP(l, newServer(u))
	}
	if cfg.Control != "" {
		l, err := listen(cfg.Control)
		if err != nil {
			return nil, err
		}
		u.ControlAddr = l.Addr()
		u.serveHTTP(l, newServer(u.controlHandler()))
	}
	u.ready = fmt.Sprintf("testnet upstream: ready https=%v http=%v control=%v", u.TLSAddrs, u.HTTPAddrs, u.ControlAddr)
	return u, nil
}

// ServeHTTP answers every request on the HTTPS and HTTP listeners:
//
//	/status/N  status N (200..599) with the echo as body
//	/bytes/N   N bytes of application/octet-stream
//	/sink      records the request, answers {"id":ID} without echoing it
//	anything   200 with the echo
func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case strings.HasPrefix(r.URL.Path, "/bytes/"):
		n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64)
		if err != nil || n < 0 || n > maxBytes {
			http.Error(w, "bad byte count", http.StatusBadRequest)
			return
		}
		u.rec.add(echoOf(r, nil))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			writeZeros(w, n)
		}
	case strings.HasPrefix(r.URL.Path, "/status/"):
		code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		if err != nil || code < 200 || code > 599 {
			http.Error(w, "bad status code", http.StatusBadRequest)
			return
		}
		e := u.rec.add(echoOf(r, readBody(r)))
		if code == http.StatusNoContent || code == http.StatusNotModified {
			w.WriteHeader(code)
			return
		}
		writeJSON(w, code, e)
	case r.URL.Path == "/sink":
		e := u.rec.add(echoOf(r, readBody(r)))
		writeJSON(w, http.StatusOK, map[string]int64{"id": e.ID})
	default:
		writeJSON(w, http.StatusOK, u.rec.add(echoOf(r, readBody(r))))
	}
}

func (u *upstream) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, u.rec.snapshot())
	})
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, u.rec.reset())
	})
	return mux
}

func readBody(r *http.Request) []byte {
	b, _ := io.ReadAll(io.LimitReader(r.Body, maxEchoBody))
	return b
}

var zeros = make([]byte, 64<<10)

func writeZeros(w io.Writer, n int64) {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return
		}
		n -= k
	}
}

// echoOf describes r (ID is set by the recorder).
func echoOf(r *http.Request, body []byte) testnet.Echo {
	e := testnet.Echo{
		Method:   r.Method,
		Host:     r.Host,
		Path:     r.URL.Path,
		RawQuery: r.URL.RawQuery,
		Headers:  r.Header.Clone(),
		Proto:    r.Proto,
		Remote:   r.RemoteAddr,
	}
	if e.Headers == nil {
		e.Headers = map[string][]string{}
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		e.Local = a.String()
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			e.Body = string(body)
		} else {
			e.BodyBase64 = base64.StdEncoding.EncodeToString(body)
		}
	}
	if r.TLS != nil {
		e.TLS = true
		e.ServerName = r.TLS.ServerName
		e.ALPN = r.TLS.NegotiatedProtocol
		e.TLSVersion = tls.VersionName(r.TLS.Version)
	}
	return e
}

// recorder keeps the count of requests served and the latest ones.
type recorder struct {
	mu     sync.Mutex
	nextID int64
	count  int64
	ring   []testnet.Echo
}

// add assigns e an ID, records it and returns it.
func (rc *recorder) add(e testnet.Echo) testnet.Echo {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.nextID++
	rc.count++
	e.ID = rc.nextID
	if len(rc.ring) >= testnet.RecentMax {
		rc.ring = append(rc.ring[:0], rc.ring[1:]...)
	}
	rc.ring = append(rc.ring, e)
	return e
}

func (rc *recorder) snapshot() testnet.Requests {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return testnet.Requests{Count: rc.count, Requests: append([]testnet.Echo{}, rc.ring...)}
}

// reset forgets everything recorded and returns what it was (IDs keep
// increasing).
func (rc *recorder) reset() testnet.Requests {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	old := testnet.Requests{Count: rc.count, Requests: rc.ring}
	if old.Requests == nil {
		old.Requests = []testnet.Echo{}
	}
	rc.count, rc.ring = 0, nil
	return old
}
