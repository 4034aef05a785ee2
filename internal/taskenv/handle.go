package taskenv

// Session, the handle of one running session, and its connection to the
// worker.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/shellquote"
	"vak/internal/worker/wire"
)

// Session is a connection to one session's worker.
type Session struct {
	m      *Manager
	rec    *record
	client *wire.Client
	conn   io.Closer
	stderr *wire.TailBuffer // the worker's stderr, when attached to stdio
}

// ID is the session ID.
func (s *Session) ID() string { return s.rec.ID }

// Container is the container ID.
func (s *Session) Container() string { return s.rec.Container }

// Workspace is the session's workspace.
func (s *Session) Workspace() string { return s.rec.Workspace }

// Image is the image ID the session is pinned to.
func (s *Session) Image() string { return s.rec.Image }

// Ready is the worker's ready event.
func (s *Session) Ready() wire.Event { return s.client.Ready() }

// Done is closed when the connection to the worker ends.
func (s *Session) Done() <-chan struct{} { return s.client.Done() }

// Exec runs c in the session. A worker that died ends the session: the
// error wraps ErrSessionEnded and says how it died.
func (s *Session) Exec(ctx context.Context, c Command) (*Result, error) {
	a, err := BashArgsOf(c)
	if err != nil {
		return nil, err
	}
	if _, err := resolveDir(s.rec.Workspace, c.Dir); err != nil {
		return nil, err
	}
	if err := s.m.checkSidecar(ctx, s.rec); err != nil {
		return nil, err
	}
	if err := s.EnsureWatcher(ctx); err != nil {
		return nil, err
	}
	// What the workspace watcher removes while the command runs (from the
	// command or anything else) is reported after it (Manager.Planted).
	mark := s.m.watchLogSize(s.rec)
	defer s.m.reportSince(s.rec, mark)
	var res *Result
	if c.StdinStream != nil {
		res, err = s.client.BashInteractive(ctx, a, c.StdinStream, nil, c.Signal, c.Output)
	} else {
		res, err = s.client.Bash(ctx, a, c.Output)
	}
	if err != nil && errors.Is(err, wire.ErrWorkerExited) {
		return nil, s.m.ended(s.rec, err)
	}
	return res, err
}

// BashArgsOf is the worker request of c: its argv checked and joined by
// the quoting layer, its options carried over. A streamed stdin makes an
// interactive request whose command replaces the worker's shell.
func BashArgsOf(c Command) (wire.BashArgs, error) {
	if len(c.Argv) == 0 {
		return wire.BashArgs{}, fmt.Errorf("%w: no command", ErrInvalidSpec)
	}
	if err := shellquote.Check(c.Argv...); err != nil {
		return wire.BashArgs{}, err
	}
	a := wire.BashArgs{Command: shellquote.Join(c.Argv), Cwd: c.Dir, Env: c.Env, MaxOutputBytes: c.MaxOutputBytes, Stream: c.Output != nil}
	if c.Timeout > 0 {
		a.TimeoutMS = max(1, c.Timeout.Milliseconds())
	}
	if c.Stdin != nil {
		in := string(c.Stdin)
		a.Stdin = &in
	}
	if c.StdinStream != nil {
		if c.Output == nil || c.Stdin != nil {
			return wire.BashArgs{}, fmt.Errorf("%w: a streamed stdin needs Output and no Stdin", ErrInvalidSpec)
		}
		a.Interactive = true
		a.Command = "exec " + a.Command
	}
	return a, nil
}

// EnsureWatcher checks that the session's workspace watcher runs, and
// starts it again if it does not (its first pass sweeps against the
// workspace at create); it fails with ErrWatcher when it cannot. Exec
// checks it before every command; a caller that sends requests through
// Client itself checks it before each of its own.
func (s *Session) EnsureWatcher(ctx context.Context) error { return s.m.ensureWatch(ctx, s.rec) }

// Client is the raw protocol client (file tools: read, write, edit, glob,
// grep run inside the container under fsguard at the same paths).
func (s *Session) Client() *wire.Client { return s.client }

// Close drops this connection; the session keeps running.
func (s *Session) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.client.Close(ctx)
	err := s.conn.Close()
	s.m.forget(s)
	return err
}

// Discard destroys the session.
func (s *Session) Discard(ctx context.Context) error {
	s.Close()
	return s.m.Discard(ctx, s.rec.ID)
}

// halfCloser makes Close end only our sending side, so the worker answers
// what is in flight before the connection ends.
type halfCloser struct{ net.Conn }

func (h halfCloser) Close() error {
	if cw, ok := h.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return h.Conn.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// attachment is the broker's end of a container's attached stdio.
type attachment struct {
	hj     client.HijackedResponse
	stdout *io.PipeReader
	stderr *wire.TailBuffer
	once   sync.Once
}

// attach attaches to a created container's stdio (before it starts, so
// nothing it writes is missed) and demultiplexes stdout and stderr.
func attach(ctx context.Context, cli *client.Client, cid string) (*attachment, error) {
	res, err := cli.ContainerAttach(ctx, cid, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, engine.APIError("attach to session container", err)
	}
	pr, pw := io.Pipe()
	a := &attachment{hj: res.HijackedResponse, stdout: pr, stderr: wire.NewTailBuffer(8 << 10)}
	go func() {
		_, err := stdcopy.StdCopy(pw, a.stderr, res.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	return a, nil
}

// Write sends to the worker's stdin.
func (a *attachment) Write(p []byte) (int, error) { return a.hj.Conn.Write(p) }

// Close detaches (the container's stdin stays open: it is not StdinOnce).
func (a *attachment) Close() error {
	a.once.Do(a.hj.Close)
	return nil
}
