package agentnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Task is one running task's registration (a `vak mcp` server, a `vak
// run`), kept by the trusted process that serves it. The token never
// leaves it: callers use its methods, which attach the token.
//
// Refresh keeps the registration current: it renews the token when half
// its life has passed, and when the broker restarted (another instance
// answers; registrations live in the broker's memory) it registers again
// under the same workspace. A task that was revoked on the broker it
// registered with stays off, even after a later broker restart:
// revocation is not undone by a refresh.
type Task struct {
	// Client reaches the broker.
	Client *Client
	// Workspace is the canonical workspace the task serves.
	Workspace string
	// Ensure, if set, is called when the broker does not answer, to start
	// one (Ensure with the vak command); nil means it must be running.
	Ensure func(ctx context.Context) error

	mu       sync.Mutex
	token    string
	instance string // the broker instance that issued token
	renewAt  time.Time
	ident    Identity
	closed   bool
}

// Register registers the task (starting the broker through Ensure if none
// answers) and returns the workspace's identity.
func (t *Task) Register(ctx context.Context) (Identity, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.reachLocked(ctx); err != nil {
		return Identity{}, err
	}
	return t.ident, t.registerLocked(ctx)
}

// reachLocked pings the broker, starting it through Ensure if it does not
// answer.
func (t *Task) reachLocked(ctx context.Context) error {
	if t.Client.Ping(ctx) == nil {
		return nil
	}
	if t.Ensure == nil {
		return fmt.Errorf("agentnet: no broker answers on %s (run `vak agentnet serve`)", t.Client.Socket)
	}
	return t.Ensure(ctx)
}

func (t *Task) registerLocked(ctx context.Context) error {
	r, err := t.Client.call(ctx, request{Op: "register", Workspace: t.Workspace})
	if err != nil {
		return err
	}
	if r.Identity == nil || r.Token == "" {
		return fmt.Errorf("agentnet: register: the broker returned no token")
	}
	t.token, t.instance, t.ident = r.Token, r.Instance, *r.Identity
	t.renewAt = time.Now().Add(DefaultTokenTTL / 2)
	return nil
}

// Refresh renews the token when due, registers again with a restarted
// broker, and reports whether the task is live with at least one live
// edge.
func (t *Task) Refresh(ctx context.Context) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false, nil
	}
	inst, err := t.Client.instance(ctx)
	if err != nil {
		if t.Ensure == nil {
			return false, err
		}
		if err := t.Ensure(ctx); err != nil {
			return false, err
		}
		if inst, err = t.Client.instance(ctx); err != nil {
			return false, err
		}
	}
	if inst != t.instance {
		if err := t.registerLocked(ctx); err != nil {
			return false, fmt.Errorf("agentnet: register with the restarted broker: %w", err)
		}
	} else if time.Now().After(t.renewAt) {
		tok, err := t.Client.Renew(ctx, t.token)
		switch {
		case err == nil:
			t.token, t.renewAt = tok, time.Now().Add(DefaultTokenTTL/2)
		case errors.Is(err, ErrRevoked):
			t.closed = true // revoked: stays off
			return false, nil
		case errors.Is(err, ErrToken):
			// The registration lapsed (this process was stopped past
			// the token's life): register again.
			if err := t.registerLocked(ctx); err != nil {
				return false, err
			}
		default:
			return false, err
		}
	}
	live, err := t.Client.Live(ctx, t.token)
	if err != nil || live {
		return live, err
	}
	// Not live: no edge, a lapsed registration, or this task was revoked.
	// A revoked task stays off, even across a later broker restart.
	_, err = t.Client.Peers(ctx, t.token)
	switch {
	case errors.Is(err, ErrRevoked):
		t.closed = true
	case errors.Is(err, ErrToken):
		if err := t.registerLocked(ctx); err != nil {
			return false, err
		}
		return t.Client.Live(ctx, t.token)
	}
	return false, nil
}

// Revoked reports whether the broker revoked the task (or it was closed).
func (t *Task) Revoked() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Watch calls Refresh every interval until ctx ends, and onChange (if set)
// whenever the liveness it reports changes (first call included). Errors
// count as not live and go to onErr.
func (t *Task) Watch(ctx context.Context, interval time.Duration, onChange func(live bool), onErr func(error)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	first, last := true, false
	for {
		live, err := t.Refresh(ctx)
		if err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
		if onChange != nil && (first || live != last) {
			onChange(live)
		}
		first, last = false, live
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Close unregisters the task (the broker revokes its token, closes its
// edges if it was the workspace's last task, and writes the receipts).
func (t *Task) Close(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.token == "" {
		t.closed = true
		return nil
	}
	t.closed = true
	err := t.Client.Unregister(ctx, t.token)
	t.token = ""
	return err
}

func (t *Task) tok() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.token
}

// Peers lists the live peers.
func (t *Task) Peers(ctx context.Context) ([]Peer, error) { return t.Client.Peers(ctx, t.tok()) }

// Send sends a message and returns its id.
func (t *Task) Send(ctx context.Context, peer, topic string, body []byte) (string, error) {
	return t.Client.Send(ctx, t.tok(), peer, topic, body)
}

// Request sends a request and returns its correlation id.
func (t *Task) Request(ctx context.Context, peer, topic string, body []byte) (string, error) {
	return t.Client.Request(ctx, t.tok(), peer, topic, body)
}

// Reply answers a request.
func (t *Task) Reply(ctx context.Context, correlation string, body []byte) error {
	return t.Client.Reply(ctx, t.tok(), correlation, body)
}

// Receive waits up to wait for a message on topic (and correlation).
func (t *Task) Receive(ctx context.Context, topic, correlation string, wait time.Duration) (Message, error) {
	return t.Client.Receive(ctx, t.tok(), topic, correlation, wait)
}

// Leaks reports whether data carries the task's current token or a part of
// it (its payload or its signature): tests scan every tool result and
// environment with it.
func (t *Task) Leaks(data []byte) bool {
	tok := t.tok()
	if tok == "" {
		return false
	}
	for _, p := range append(strings.Split(tok, "."), tok) {
		if len(p) >= 8 && bytes.Contains(data, []byte(p)) {
			return true
		}
	}
	return false
}
