package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// group owns the listeners and goroutines of one running role so it can be
// shut down completely (Close waits for every goroutine).
type group struct {
	mu      sync.Mutex
	closers map[io.Closer]struct{}
	wg      sync.WaitGroup
	closed  bool
}

// add registers c to be closed by Close (at once if Close has run) and
// returns a function that unregisters it.
func (g *group) add(c io.Closer) (remove func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		c.Close()
		return func() {}
	}
	if g.closers == nil {
		g.closers = map[io.Closer]struct{}{}
	}
	g.closers[c] = struct{}{}
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		delete(g.closers, c)
	}
}

// goFn runs fn in a goroutine that Close waits for.
func (g *group) goFn(fn func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
}

// serveHTTP serves h on l (TLS when the server has a TLS config) until
// Close.
func (g *group) serveHTTP(l net.Listener, srv *http.Server) {
	g.add(&closerFunc{func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			return srv.Close()
		}
		return nil
	}})
	g.goFn(func() {
		var err error
		if srv.TLSConfig != nil {
			err = srv.ServeTLS(l, "", "")
		} else {
			err = srv.Serve(l)
		}
		g.mu.Lock()
		closed := g.closed
		g.mu.Unlock()
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !closed {
			fmt.Fprintln(os.Stderr, "testnet: serve", l.Addr(), err)
		}
	})
}

// Close closes every listener and server, then waits for the goroutines.
func (g *group) Close() error {
	g.mu.Lock()
	cs := g.closers
	g.closers = nil
	g.closed = true
	g.mu.Unlock()
	var errs []error
	for c := range cs {
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	g.wg.Wait()
	return errors.Join(errs...)
}

// closerFunc is a pointer-comparable io.Closer (group keys closers in a map).
type closerFunc struct{ fn func() error }

func (f *closerFunc) Close() error { return f.fn() }

// newServer is an http.Server with conservative timeouts for h.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          nil,
	}
}

// writeJSON writes v as one line of JSON with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
