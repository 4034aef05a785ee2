package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"vak/internal/egress/asks"
)

// AskController is what a Controller also implements when it holds asks
// (internal/egress/asks): the admin socket is the one channel that answers
// them, and no sandbox reaches it.
type AskController interface {
	// Asks lists the pending asks.
	Asks() ([]asks.Ask, error)
	// FollowAsks calls fn with the pending asks, then every change, until
	// ctx ends or fn fails.
	FollowAsks(ctx context.Context, fn func(asks.Event) error) error
	// AnswerAsk answers a pending ask.
	AnswerAsk(id string, a asks.Answer) error
}

// PathAsks lists the pending asks (GET; ?follow=1 streams events as JSON
// lines); PathAsks/ID/allow?scope=once|run|always and PathAsks/ID/deny
// answer one (POST; &rule=NAME names a rule the answer added to the user
// config).
const PathAsks = "/v1/asks"

type connKey struct{}

// serveAsks adds the ask API to mux when ctl holds asks.
func serveAsks(mux *http.ServeMux, ctl Controller, writeJSON func(http.ResponseWriter, int, any)) {
	ac, ok := ctl.(AskController)
	if !ok {
		return
	}
	fail := func(w http.ResponseWriter, err error) {
		var status int
		switch {
		case errors.Is(err, asks.ErrNoSuchAsk):
			status = http.StatusNotFound
		case errors.Is(err, asks.ErrBadAnswer):
			status = http.StatusBadRequest
		default:
			status = http.StatusConflict
		}
		writeJSON(w, status, map[string]string{"error": err.Error()})
	}
	mux.HandleFunc("GET "+PathAsks, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") == "" {
			list, err := ac.Asks()
			if err != nil {
				fail(w, err)
				return
			}
			writeJSON(w, 200, list)
			return
		}
		fl, _ := w.(http.Flusher)
		started := false
		err := ac.FollowAsks(r.Context(), func(e asks.Event) error {
			if !started {
				w.Header().Set("Content-Type", "application/x-ndjson")
				w.WriteHeader(200)
				started = true
			}
			if err := json.NewEncoder(w).Encode(e); err != nil {
				return err
			}
			if fl != nil {
				fl.Flush()
			}
			return nil
		})
		if err != nil && !started {
			fail(w, err)
		}
	})
	answer := func(w http.ResponseWriter, r *http.Request, a asks.Answer) {
		a.Rule = r.URL.Query().Get("rule")
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		a.By = "admin socket"
		if c != nil {
			a.By = peerName(c)
		}
		// The channel the answering command relayed (the peer's own label).
		if via := oneLineMax(r.URL.Query().Get("via"), 80); via != "" {
			a.By += ", via " + via
		}
		if err := ac.AnswerAsk(r.PathValue("id"), a); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, 200, a)
	}
	mux.HandleFunc("POST "+PathAsks+"/{id}/allow", func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, asks.Answer{Allow: true, Scope: asks.Scope(r.URL.Query().Get("scope"))})
	})
	mux.HandleFunc("POST "+PathAsks+"/{id}/deny", func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, asks.Answer{})
	})
}

// oneLineMax is s without control characters, at most n bytes.
func oneLineMax(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// Asks lists the gateway's pending asks.
func (c *Client) Asks(ctx context.Context) ([]asks.Ask, error) {
	var out []asks.Ask
	err := c.do(ctx, "GET", PathAsks, &out)
	return out, err
}

// AnswerAsk answers the pending ask id: allow with scope (asks.Once,
// asks.Run or asks.Always), or deny; rule names a rule the answer added to
// the user config ("": none). It returns the answer as recorded.
func (c *Client) AnswerAsk(ctx context.Context, id string, allow bool, scope asks.Scope, rule string) (asks.Answer, error) {
	return c.AnswerAskVia(ctx, id, allow, scope, rule, "")
}

// AnswerAskVia is AnswerAsk for an answer relayed from another channel,
// which via names for the receipts (e.g. "MCP elicitation").
func (c *Client) AnswerAskVia(ctx context.Context, id string, allow bool, scope asks.Scope, rule, via string) (asks.Answer, error) {
	var out asks.Answer
	q := url.Values{}
	if via != "" {
		q.Set("via", via)
	}
	verb := "deny"
	if allow {
		verb = "allow"
		q.Set("scope", string(scope))
	}
	if rule != "" {
		q.Set("rule", rule)
	}
	p := PathAsks + "/" + url.PathEscape(id) + "/" + verb
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	err := c.do(ctx, "POST", p, &out)
	return out, err
}

// FollowAsks calls fn with the pending asks, then each change, until ctx
// ends (nil) or the gateway goes away (an error).
func (c *Client) FollowAsks(ctx context.Context, fn func(asks.Event) error) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://gateway"+PathAsks+"?follow=1", nil)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: c.hc.Transport} // no overall timeout: it streams
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%w on %s: %v", ErrNotRunning, c.Socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return statusError(resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e asks.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("admin: follow asks: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("admin: the gateway ended the stream of asks (it stopped or reloaded)")
}
