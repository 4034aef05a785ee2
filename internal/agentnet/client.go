package agentnet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// Client talks to a broker over its socket, one connection per call. It
// holds no token: callers (the trusted process serving the tool) do.
type Client struct {
	// Socket is the broker socket path.
	Socket string
}

// NewClient returns a client of the broker whose state dir is dir.
func NewClient(dir string) *Client { return &Client{Socket: filepath.Join(dir, SocketName)} }

func (c *Client) call(ctx context.Context, req request) (response, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return response{}, fmt.Errorf("agentnet: broker at %s: %w", c.Socket, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	line, _ := json.Marshal(req)
	// A write error is reported only if no response follows: a broker
	// that refuses the connection answers and closes before reading.
	_, werr := conn.Write(append(line, '\n'))
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	if !sc.Scan() {
		if ctx.Err() != nil {
			return response{}, ctx.Err()
		}
		return response{}, fmt.Errorf("agentnet: broker closed the connection: %w", errors.Join(werr, sc.Err(), net.ErrClosed))
	}
	var resp response
	if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
		return response{}, fmt.Errorf("agentnet: broker response: %w", err)
	}
	if resp.Error != "" {
		if s, ok := kinds[resp.Kind]; ok {
			return resp, &remoteError{msg: resp.Error, kind: s}
		}
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// remoteError is a broker error that still matches its sentinel.
type remoteError struct {
	msg  string
	kind error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

// Register registers a task for workspace and returns its token.
func (c *Client) Register(ctx context.Context, workspace string) (string, Identity, error) {
	r, err := c.call(ctx, request{Op: "register", Workspace: workspace})
	if err != nil {
		return "", Identity{}, err
	}
	return r.Token, *r.Identity, nil
}

// Renew returns a fresh token for a live task.
func (c *Client) Renew(ctx context.Context, tok string) (string, error) {
	r, err := c.call(ctx, request{Op: "renew", Token: tok})
	return r.Token, err
}

// Unregister ends a task.
func (c *Client) Unregister(ctx context.Context, tok string) error {
	_, err := c.call(ctx, request{Op: "unregister", Token: tok})
	return err
}

// Peers lists the live peers.
func (c *Client) Peers(ctx context.Context, tok string) ([]Peer, error) {
	r, err := c.call(ctx, request{Op: "peers", Token: tok})
	return r.Peers, err
}

// Send sends a message and returns its id.
func (c *Client) Send(ctx context.Context, tok, peer, topic string, body []byte) (string, error) {
	r, err := c.call(ctx, request{Op: "send", Token: tok, Peer: peer, Topic: topic, Body: body})
	return r.ID, err
}

// Request sends a request and returns its correlation id.
func (c *Client) Request(ctx context.Context, tok, peer, topic string, body []byte) (string, error) {
	r, err := c.call(ctx, request{Op: "request", Token: tok, Peer: peer, Topic: topic, Body: body})
	return r.Correlation, err
}

// Reply answers a request.
func (c *Client) Reply(ctx context.Context, tok, correlation string, body []byte) error {
	_, err := c.call(ctx, request{Op: "reply", Token: tok, Correlation: correlation, Body: body})
	return err
}

// Receive waits up to wait for a message on topic (and correlation).
func (c *Client) Receive(ctx context.Context, tok, topic, correlation string, wait time.Duration) (Message, error) {
	r, err := c.call(ctx, request{Op: "receive", Token: tok, Topic: topic, Correlation: correlation, WaitMS: wait.Milliseconds()})
	if err != nil {
		return Message{}, err
	}
	return *r.Message, nil
}

// Live reports whether the task is live with at least one live edge.
func (c *Client) Live(ctx context.Context, tok string) (bool, error) {
	r, err := c.call(ctx, request{Op: "live", Token: tok})
	return r.Live, err
}

// Edges returns the graph.
func (c *Client) Edges(ctx context.Context) ([]EdgeStatus, error) {
	r, err := c.call(ctx, request{Op: "edges"})
	return r.Edges, err
}

// Revoke revokes a workspace's tasks and closes its edges; it returns the
// number of tasks revoked.
func (c *Client) Revoke(ctx context.Context, workspace string) (int, error) {
	r, err := c.call(ctx, request{Op: "revoke", Workspace: workspace})
	return r.N, err
}

// Reload makes the broker re-read its policies.
func (c *Client) Reload(ctx context.Context) error {
	_, err := c.call(ctx, request{Op: "reload"})
	return err
}
