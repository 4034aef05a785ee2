package worker

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// ServeListener serves the protocol on every connection ln accepts, each
// with a fresh Server from newServer (servers may share Files and Shell; a
// Server itself belongs to one connection). Each connection starts with the
// ready event, exactly like stdio. A connection ends when its peer closes
// its side: requests in flight finish and are answered first. A peer that
// hangs up (closes both sides: it exited or was killed) gets the commands
// in flight canceled instead, since nobody reads their answers.
//
// ServeListener returns nil when ctx ends, or the error that made Accept
// fail for good; either way it first closes ln and every connection
// (canceling their requests) and waits for them.
func ServeListener(ctx context.Context, ln net.Listener, newServer func() *Server) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && backoff < time.Second {
				// Out of descriptors or similar: wait and retry, like net/http.
				backoff = max(2*backoff, 5*time.Millisecond)
				time.Sleep(backoff)
				continue
			}
			stopped := ctx.Err() != nil
			cancel()
			wg.Wait()
			if stopped {
				return nil
			}
			return err
		}
		backoff = 0
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			c.Close()
			continue
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			newServer().Serve(ctx, c, c)
			c.Close()
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		}()
	}
}
