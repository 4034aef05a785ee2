package agentnet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Client talks to a broker over its socket. It keeps the connections of
// finished calls open and reuses them (a call takes an idle connection or
// dials a new one, so concurrent calls, such as a blocking receive next to
// a send, each have their own). A reused connection that turns out dead (a
// restarted broker) is replaced by a fresh dial once. It holds no token:
// callers (the trusted process serving the tool) do.
type Client struct {
	// Socket is the broker socket path.
	Socket string

	mu   sync.Mutex
	idle []*clientConn
}

// maxIdle bounds the idle connections a Client keeps.
const maxIdle = 4

type clientConn struct {
	net.Conn
	r *bufio.Reader
}

// NewClient returns a client of the broker whose state dir is dir.
func NewClient(dir string) *Client { return &Client{Socket: filepath.Join(dir, SocketName)} }

// Close closes the idle connections.
func (c *Client) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, cc := range idle {
		cc.Close()
	}
	return nil
}

func (c *Client) get() *clientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.idle); n > 0 {
		cc := c.idle[n-1]
		c.idle = c.idle[:n-1]
		return cc
	}
	return nil
}

func (c *Client) put(cc *clientConn) {
	c.mu.Lock()
	if len(c.idle) < maxIdle {
		c.idle = append(c.idle, cc)
		cc = nil
	}
	c.mu.Unlock()
	if cc != nil {
		cc.Close()
	}
}

func (c *Client) call(ctx context.Context, req request) (response, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return response{}, fmt.Errorf("agentnet: request: %w", err)
	}
	if len(line) > MaxLine {
		// The broker would refuse it (and close the connection).
		return response{}, tooLarge(len(line))
	}
	line = append(line, '\n')
	if cc := c.get(); cc != nil {
		data, err := c.roundTrip(ctx, cc, line)
		if err == nil || !errors.Is(err, errStale) {
			return decode(data, err)
		}
		// The broker closed this idle connection (it restarted, or
		// refused the connection): dial once more.
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return response{}, fmt.Errorf("agentnet: broker at %s: %w", c.Socket, err)
	}
	data, err := c.roundTrip(ctx, &clientConn{Conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}, line)
	if errors.Is(err, errStale) {
		err = fmt.Errorf("agentnet: broker closed the connection: %w", err)
	}
	return decode(data, err)
}

// errStale is a connection the broker closed before answering.
var errStale = fmt.Errorf("no response: %w", net.ErrClosed)

// roundTrip writes one request line and reads the response line on cc;
// cc goes back to the idle list after a complete exchange, and is closed
// otherwise.
func (c *Client) roundTrip(ctx context.Context, cc *clientConn, line []byte) ([]byte, error) {
	stop := context.AfterFunc(ctx, func() { cc.SetDeadline(time.Now()) })
	// A write error is reported only if no response follows: a broker
	// that refuses the connection answers and closes before reading.
	_, werr := cc.Write(line)
	data, rerr := readLine(cc.r, MaxLine)
	if errors.Is(rerr, errLongLine) {
		rerr = fmt.Errorf("agentnet: the response exceeds %d bytes", MaxLine)
	}
	if !stop() || rerr != nil {
		cc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", errStale, errors.Join(werr, rerr))
	}
	// data aliases the reader's buffer only until the next read: copy it
	// before the connection is shared again.
	data = append([]byte(nil), data...)
	c.put(cc)
	return data, nil
}

// errLongLine is a line over readLine's limit.
var errLongLine = errors.New("line too long")

// readLine reads one line of at most max bytes, not counting its newline
// (which it returns with the line, if the line has one). A longer line is
// errLongLine as soon as it is known: the rest is not read.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		body := bytes.TrimSuffix(frag, []byte("\n"))
		if len(buf)+len(body) > max {
			return nil, errLongLine
		}
		if err == nil && buf == nil {
			return frag, nil // the reader's buffer: valid until the next read
		}
		buf = append(buf, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return buf, err
		}
	}
}

func decode(data []byte, err error) (response, error) {
	if err != nil {
		return response{}, err
	}
	var resp response
	if err := json.Unmarshal(data, &resp); err != nil {
		return response{}, fmt.Errorf("agentnet: broker response: %w", err)
	}
	if resp.Error != "" {
		var ks []error
		for _, k := range strings.Split(resp.Kind, ",") {
			if s, ok := kinds[k]; ok {
				ks = append(ks, s)
			}
		}
		if len(ks) > 0 {
			return resp, &remoteError{msg: resp.Error, kinds: ks}
		}
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

// remoteError is a broker error that still matches its sentinels.
type remoteError struct {
	msg   string
	kinds []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.kinds }

// Register registers a task for workspace and returns its token.
func (c *Client) Register(ctx context.Context, workspace string) (string, Identity, error) {
	r, err := c.call(ctx, request{Op: "register", Workspace: workspace})
	if err != nil {
		return "", Identity{}, err
	}
	if r.Identity == nil {
		return "", Identity{}, fmt.Errorf("agentnet: register: the broker returned no identity")
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

// Ping checks that a broker answers on the socket.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.instance(ctx)
	return err
}

// instance is the answering broker's instance (Broker.Instance).
func (c *Client) instance(ctx context.Context) (string, error) {
	r, err := c.call(ctx, request{Op: "ping"})
	return r.Instance, err
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
