package agentnet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"vak/internal/peercred"
)

// SocketName is the broker's socket inside its state dir.
const SocketName = "agentnet.sock"

// MaxWait bounds a receive's wait.
const MaxWait = 5 * time.Minute

// MaxLine bounds one request or response line, without its newline, on
// the broker's socket (a message body is bounded by quotas well below
// this: at most 16 MiB, 22 MiB as base64). The broker answers a longer
// request with ErrTooLarge and closes the connection; Client refuses to
// send one.
const MaxLine = 32 << 20

// tooLarge is the error for a request line over MaxLine.
func tooLarge(size int) error {
	what := "the request line is over"
	if size > 0 {
		what = fmt.Sprintf("the request is %d bytes, over", size)
	}
	return fmt.Errorf("%w: %s the broker's limit of %d bytes (%d MiB) per request: send smaller messages (an edge's max_message_bytes is at most 16 MiB)", ErrTooLarge, what, MaxLine, MaxLine>>20)
}

// request is one line a client sends.
type request struct {
	Op          string `json:"op"`
	Workspace   string `json:"workspace,omitempty"`
	Token       string `json:"token,omitempty"`
	Peer        string `json:"peer,omitempty"`
	Topic       string `json:"topic,omitempty"`
	Correlation string `json:"correlation,omitempty"`
	Body        []byte `json:"body,omitempty"`
	WaitMS      int64  `json:"wait_ms,omitempty"`
}

// response is the broker's answer to one request.
type response struct {
	Error string `json:"error,omitempty"`
	// Kind classifies Error so the client can rebuild the sentinel.
	Kind        string       `json:"kind,omitempty"`
	Token       string       `json:"token,omitempty"`
	Identity    *Identity    `json:"identity,omitempty"`
	Peers       []Peer       `json:"peers,omitempty"`
	Message     *Message     `json:"message,omitempty"`
	ID          string       `json:"id,omitempty"`
	Correlation string       `json:"correlation,omitempty"`
	Edges       []EdgeStatus `json:"edges,omitempty"`
	Live        bool         `json:"live,omitempty"`
	N           int          `json:"n,omitempty"`
	Instance    string       `json:"instance,omitempty"`
}

var kinds = map[string]error{
	"token": ErrToken, "no-edge": ErrNoEdge, "destination": ErrDestination, "quota": ErrQuota,
	"revoked": ErrRevoked, "timeout": ErrTimeout, "register": ErrRegister, "bad-request": ErrBadRequest,
	"too-large": ErrTooLarge,
}

// kindOf names every sentinel err matches, comma-separated in a fixed
// order (a revoked task's token error is "revoked,token").
func kindOf(err error) string {
	var ks []string
	for k, s := range kinds {
		if errors.Is(err, s) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// LockName is the lock a listening broker holds for its whole life (one
// broker per state dir); StartLockName serializes the clients that start
// one on demand (Ensure).
const (
	LockName      = "broker.lock"
	StartLockName = "start.lock"
)

// Listen creates the broker socket in dir (0700) with mode 0600, holding
// the broker lock (LockName) until the listener closes: a second broker
// for the same dir fails while the first lives. Under the lock, a socket
// file left by a broker that died is stale and is replaced.
func Listen(dir string) (net.Listener, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agentnet: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agentnet: %w", err)
	}
	path := filepath.Join(dir, SocketName)
	unlock, ok, err := tryLock(filepath.Join(dir, LockName))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("agentnet: a broker is already running for %s (it holds %s)", dir, filepath.Join(dir, LockName))
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		unlock()
		return nil, fmt.Errorf("agentnet: a broker is already listening on %s", path)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("agentnet: listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		unlock()
		return nil, fmt.Errorf("agentnet: %w", err)
	}
	return &lockedListener{Listener: l, unlock: unlock}, nil
}

// lockedListener releases the broker lock when it closes.
type lockedListener struct {
	net.Listener
	once   sync.Once
	unlock func()
}

func (l *lockedListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(l.unlock)
	return err
}

// Server serves a Broker on a listener.
type Server struct {
	Broker *Broker
	// UID is the only peer uid accepted.
	UID int
	// Reload, if set, re-reads the policies (the "reload" operation).
	Reload func() error
}

// Serve accepts connections until ctx ends or l fails.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	// Closed (and the broker lock released) before Serve returns, not
	// only by the goroutine below.
	defer l.Close()
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("agentnet: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handle(ctx, c)
		}()
	}
}

func (s *Server) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	uid, err := peercred.UID(c)
	if err != nil || uid != s.UID {
		s.Broker.receipt("connect", "", "", "", "deny", fmt.Sprintf("peer uid %d is not %d (%v)", uid, s.UID, err), 0)
		json.NewEncoder(c).Encode(response{Error: fmt.Sprintf("agentnet: connection refused: peer uid %d is not the broker's uid %d", uid, s.UID), Kind: "register"})
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Clients keep their connections open between calls: a stopping
	// broker closes them.
	context.AfterFunc(ctx, func() { c.Close() })
	br := bufio.NewReaderSize(c, 64<<10)
	enc := json.NewEncoder(c)
	for {
		line, err := readLine(br, MaxLine)
		if errors.Is(err, errLongLine) {
			// Answered before the close: the rest of the line is not read.
			err = tooLarge(0)
			enc.Encode(response{Error: err.Error(), Kind: kindOf(err)})
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if err != nil {
				return
			}
			continue
		}
		var req request
		var resp response
		if err := json.Unmarshal(line, &req); err != nil {
			resp = response{Error: fmt.Sprintf("%v: %v", ErrBadRequest, err), Kind: "bad-request"}
		} else if req.Op == "receive" {
			var ok bool
			if resp, ok = s.receive(ctx, c, req, uid); !ok {
				return
			}
		} else {
			resp = s.do(ctx, req, uid)
		}
		if werr := enc.Encode(resp); werr != nil || err != nil {
			return // a client gone, or its last line without a newline
		}
	}
}

// receive serves a receive, which may wait, while watching its connection:
// a client that goes away (a canceled tool call closes its connection)
// cancels the wait, so no message is taken off a queue for a reader that
// is gone. A connection carries one request at a time: bytes that arrive
// while a receive waits end the connection (ok = false).
func (s *Server) receive(ctx context.Context, c net.Conn, req request, uid int) (resp response, ok bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var extra atomic.Bool
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var b [1]byte
		n, err := c.Read(b[:])
		if n > 0 {
			extra.Store(true)
			cancel()
		} else if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			cancel() // the client is gone
		}
	}()
	resp = s.do(ctx, req, uid)
	c.SetReadDeadline(time.Now())
	<-watched
	c.SetReadDeadline(time.Time{})
	return resp, !extra.Load()
}

func (s *Server) do(ctx context.Context, req request, uid int) response {
	b := s.Broker
	var resp response
	var err error
	switch req.Op {
	case "register":
		var id Identity
		resp.Token, id, err = b.Register(req.Workspace, uid)
		resp.Identity = &id
		resp.Instance = b.Instance()
	case "renew":
		resp.Token, err = b.Renew(req.Token)
	case "unregister":
		err = b.Unregister(req.Token)
	case "peers":
		resp.Peers, err = b.Peers(req.Token)
	case "send":
		resp.ID, err = b.Send(req.Token, req.Peer, req.Topic, req.Body)
	case "request":
		resp.Correlation, err = b.Request(req.Token, req.Peer, req.Topic, req.Body)
	case "reply":
		err = b.Reply(req.Token, req.Correlation, req.Body)
	case "receive":
		wait := min(time.Duration(req.WaitMS)*time.Millisecond, MaxWait)
		var m Message
		m, err = b.Receive(ctx, req.Token, req.Topic, req.Correlation, wait)
		if err == nil {
			resp.Message = &m
		}
	case "ping":
		resp.Instance = b.Instance()
	case "live":
		resp.Live = b.Live(req.Token)
	case "edges":
		resp.Edges = b.Edges()
	case "revoke":
		resp.N, err = b.Revoke(req.Workspace)
	case "reload":
		if s.Reload == nil {
			err = fmt.Errorf("%w: this broker has no reload", ErrBadRequest)
		} else {
			err = s.Reload()
		}
	default:
		err = fmt.Errorf("%w: unknown operation %q", ErrBadRequest, req.Op)
	}
	if err != nil {
		return response{Error: err.Error(), Kind: kindOf(err)}
	}
	return resp
}
