package wire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrWorkerExited reports that the worker died or closed its output; every
// call in flight fails with it (the message carries the worker's last stderr).
var ErrWorkerExited = errors.New("worker exited")

// DefaultStartTimeout bounds how long a worker may take to report ready.
const DefaultStartTimeout = 30 * time.Second

// Client is the broker's side of one worker connection.
type Client struct {
	w     io.WriteCloser
	wmu   sync.Mutex
	ready Event

	mu      sync.Mutex
	pending map[string]*call
	closed  error
	nextID  atomic.Uint64
	done    chan struct{}

	readyCh <-chan Event
	exited  chan struct{} // closed once cmd.Wait returned (Start only)
	cmd     *exec.Cmd
	stderr  *TailBuffer
}

type call struct {
	resp   chan Response
	output func(stream string, data []byte)
}

// Start starts cmd as a worker and waits for its ready event. cmd's stdin and
// stdout must be unset (the client owns them); its stderr, if unset, is kept
// (the last few KiB) for error messages. onStarted, if set, runs right after
// the process started and before waiting for ready (the broker uses it to
// place the worker in a cgroup and then hand it its spec); an error from it
// kills the worker.
func Start(ctx context.Context, cmd *exec.Cmd, onStarted func(pid int) error) (*Client, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	tail := NewTailBuffer(8 << 10)
	if cmd.Stderr == nil {
		cmd.Stderr = tail
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	if onStarted != nil {
		if err := onStarted(cmd.Process.Pid); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, err
		}
	}
	c := NewClient(in, out)
	c.cmd, c.stderr, c.exited = cmd, tail, make(chan struct{})
	go func() {
		<-c.done
		cmd.Wait()
		close(c.exited)
	}()
	if err := c.waitReady(ctx); err != nil {
		cmd.Process.Kill()
		return nil, err
	}
	return c, nil
}

// NewClient speaks the protocol over an existing connection (w to the
// worker, r from it). Call WaitReady before the first request.
func NewClient(w io.WriteCloser, r io.Reader) *Client {
	c := &Client{w: w, pending: map[string]*call{}, done: make(chan struct{})}
	readyCh := make(chan Event, 1)
	go c.readLoop(r, readyCh)
	c.readyCh = readyCh
	return c
}

// Ready is the worker's ready event (backend and sandbox description).
func (c *Client) Ready() Event { return c.ready }

// WaitReady waits for the worker's ready event.
func (c *Client) WaitReady(ctx context.Context) error { return c.waitReady(ctx) }

func (c *Client) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	select {
	case ev := <-c.readyCh:
		c.ready = ev
		return nil
	case <-c.done:
		return c.exitErr()
	case <-ctx.Done():
		return fmt.Errorf("worker did not become ready: %w", ctx.Err())
	}
}

func (c *Client) readLoop(r io.Reader, readyCh chan<- Event) {
	defer close(c.done)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			c.handleLine(line, readyCh)
		}
		if err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *Client) handleLine(line []byte, readyCh chan<- Event) {
	var m struct {
		ID     string          `json:"id"`
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
		Event  string          `json:"event"`
		Stream string          `json:"stream"`
		Data   []byte          `json:"data"`
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return // the worker never writes garbage; ignore rather than crash
	}
	switch m.Event {
	case "ready":
		var ev Event
		json.Unmarshal(line, &ev)
		select {
		case readyCh <- ev:
		default:
		}
		return
	case "output":
		c.mu.Lock()
		cl := c.pending[m.ID]
		c.mu.Unlock()
		if cl != nil && cl.output != nil {
			cl.output(m.Stream, m.Data)
		}
		return
	}
	c.mu.Lock()
	cl := c.pending[m.ID]
	delete(c.pending, m.ID)
	c.mu.Unlock()
	if cl != nil {
		cl.resp <- Response{ID: m.ID, OK: m.OK, Result: m.Result, Error: m.Error}
	}
}

func (c *Client) fail(err error) {
	if errors.Is(err, io.EOF) {
		err = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = err
	for id, cl := range c.pending {
		close(cl.resp)
		delete(c.pending, id)
	}
}

func (c *Client) exitErr() error {
	if c.exited != nil {
		select {
		case <-c.exited:
		case <-time.After(2 * time.Second):
		}
	}
	msg := ""
	if c.stderr != nil {
		msg = c.stderr.String()
	}
	if c.exited != nil && c.cmd.ProcessState != nil {
		msg = c.cmd.ProcessState.String() + ": " + msg
	}
	if msg != "" {
		return fmt.Errorf("%w: %s", ErrWorkerExited, msg)
	}
	return ErrWorkerExited
}

// Call sends op with args and decodes the result into result (may be nil).
// Canceling ctx sends a cancel request for it and returns ctx's error.
func (c *Client) Call(ctx context.Context, op string, args, result any) error {
	return c.call(ctx, op, args, result, nil, nil)
}

// Tools lists the tools the worker serves (the tools op).
func (c *Client) Tools(ctx context.Context) ([]string, error) {
	var r ToolsResult
	if err := c.call(ctx, OpTools, struct{}{}, &r, nil, nil); err != nil {
		return nil, err
	}
	return r.Tools, nil
}

// Bash runs a command; with a.Stream set, output is delivered to onOutput
// as it arrives.
func (c *Client) Bash(ctx context.Context, a BashArgs, onOutput func(stream string, data []byte)) (*BashResult, error) {
	var res BashResult
	if err := c.call(ctx, OpBash, a, &res, onOutput, nil); err != nil {
		return nil, err
	}
	return &res, nil
}

// BashInteractive runs an interactive command (a.Interactive or a.TTY set;
// a.Stream is implied): stdin, if set, is copied to it with input requests,
// one in flight at a time, until stdin reaches EOF (then the command's
// input ends) or the command ends; every size received on resize is sent
// as a resize request, and every signal name received on signals (one of
// Signals) as a signal request. A read from stdin that is pending when the
// command ends is left behind (its data is dropped).
func (c *Client) BashInteractive(ctx context.Context, a BashArgs, stdin io.Reader, resize <-chan TTYSize, signals <-chan string, onOutput func(stream string, data []byte)) (*BashResult, error) {
	if !a.Interactive && a.TTY == nil {
		return nil, errors.New("worker client: BashInteractive needs Interactive or TTY")
	}
	a.Stream = true
	var res BashResult
	stop := make(chan struct{})
	defer close(stop)
	err := c.call(ctx, OpBash, a, &res, onOutput, func(id string) {
		if stdin != nil {
			go c.feed(id, stdin, stop)
		}
		if resize != nil {
			go c.resizes(id, resize, stop)
		}
		if signals != nil {
			go c.signals(id, signals, stop)
		}
	})
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// feed copies stdin to the interactive request id.
func (c *Client) feed(id string, stdin io.Reader, stop <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := stdin.Read(buf)
		select {
		case <-stop:
			return
		default:
		}
		eof := err != nil
		if n > 0 || eof {
			// The worker answers once the command took the data, or with an
			// error once it ended: never blocks forever.
			if c.Call(context.Background(), OpInput, InputArgs{Target: id, Data: buf[:n], EOF: eof}, nil) != nil {
				return
			}
		}
		if eof {
			return
		}
	}
}

// resizes forwards terminal sizes to the interactive request id.
func (c *Client) resizes(id string, resize <-chan TTYSize, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case sz, ok := <-resize:
			if !ok {
				return
			}
			if c.Call(context.Background(), OpResize, ResizeArgs{Target: id, TTYSize: sz}, nil) != nil {
				return
			}
		}
	}
}

// signals forwards signals to the interactive request id. One that finds
// the command gone (or is refused) is dropped: the command's end answers
// the request anyway.
func (c *Client) signals(id string, signals <-chan string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case sig, ok := <-signals:
			if !ok {
				return
			}
			c.Call(context.Background(), OpSignal, SignalArgs{Target: id, Signal: sig}, nil)
		}
	}
}

func (c *Client) call(ctx context.Context, op string, args, result any, output func(string, []byte), sent func(id string)) error {
	raw, err := Marshal(args)
	if err != nil {
		return err
	}
	id := strconv.FormatUint(c.nextID.Add(1), 10)
	line, err := Marshal(Request{ID: id, Op: op, Args: raw})
	if err != nil {
		return err
	}
	if len(line) > MaxRequestBytes {
		// The worker would refuse it: refuse it here, without sending.
		return TooLarge(int64(len(line)))
	}
	cl := &call{resp: make(chan Response, 1), output: output}
	c.mu.Lock()
	select {
	case <-c.done:
		c.mu.Unlock()
		return c.exitErr()
	default:
	}
	c.pending[id] = cl
	c.mu.Unlock()
	if err := c.write(line); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrWorkerExited, err)
	}
	if sent != nil {
		sent(id)
	}
	select {
	case r, ok := <-cl.resp:
		return decodeResponse(r, ok, result, c)
	case <-ctx.Done():
		cargs, _ := Marshal(CancelArgs{Target: id})
		if cancel, err := Marshal(Request{ID: id + "-cancel", Op: OpCancel, Args: cargs}); err == nil {
			c.write(cancel)
		}
		// The worker still answers the canceled request (with its partial
		// result); wait for it briefly so the process tree is known dead.
		select {
		case r, ok := <-cl.resp:
			if err := decodeResponse(r, ok, result, c); err != nil {
				return err
			}
		case <-time.After(5 * time.Second):
		}
		return ctx.Err()
	}
}

func decodeResponse(r Response, ok bool, result any, c *Client) error {
	if !ok {
		return c.exitErr()
	}
	if !r.OK {
		if r.Error == nil {
			return Errorf(CodeInternal, "response without result or error")
		}
		return r.Error
	}
	if result != nil && len(r.Result) > 0 {
		return json.Unmarshal(r.Result, result)
	}
	return nil
}

// write sends one request line (without its newline).
func (c *Client) write(line []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.w.Write(append(line, '\n'))
	return err
}

// Close closes the request stream; the worker finishes what is in flight
// and exits. Close waits for that, up to the context's deadline, then kills
// the worker.
func (c *Client) Close(ctx context.Context) error {
	c.wmu.Lock()
	c.w.Close()
	c.wmu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.cmd != nil {
			c.cmd.Process.Kill()
		}
		<-c.done
	}
	if c.exited != nil {
		select {
		case <-c.exited:
		case <-ctx.Done():
			c.cmd.Process.Kill()
			<-c.exited
		}
	}
	return nil
}

// Kill ends the worker immediately.
func (c *Client) Kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		c.cmd.Process.Kill()
	}
}

// Done is closed when the worker's output ends (it exited).
func (c *Client) Done() <-chan struct{} { return c.done }

// TailBuffer keeps the last bytes written to it (a worker's diagnostics,
// for error messages).
type TailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

// NewTailBuffer keeps the last max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{max: max} }

func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
