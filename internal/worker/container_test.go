package worker

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// unixHalfCloser ends only the client's sending side on Close.
type unixHalfCloser struct{ *net.UnixConn }

func (u unixHalfCloser) Close() error { return u.CloseWrite() }

func dialClient(t *testing.T, sock string) (*wire.Client, net.Conn) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	cl := wire.NewClient(unixHalfCloser{c.(*net.UnixConn)}, c)
	if err := cl.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cl, c
}

// listenerShell is a workspace and an Exec in it for listener tests.
func listenerShell(t *testing.T) (string, *Exec) {
	t.Helper()
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ws, &Exec{Workspace: ws, Env: []string{"PATH=" + os.Getenv("PATH")}}
}

// serveListener runs ServeListener on a fresh socket with copies of
// proto (the container backend's ready event) until cancel; done gets its
// result.
func serveListener(t *testing.T, proto *Server) (sock string, cancel context.CancelFunc, done chan error) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "w.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() {
		done <- ServeListener(ctx, ln, func() *Server {
			return &Server{Files: proto.Files, Shell: proto.Shell, Ready: wire.Event{Backend: BackendContainer}}
		})
	}()
	return sock, cancel, done
}

// ServeListener serves every connection independently, each starting with
// the ready event; one client leaving does not disturb another; ending the
// context ends every connection.
func TestServeListener(t *testing.T) {
	ws, shell := listenerShell(t)
	files, err := OpenFiles(ws, sandbox.WorkspaceWrite, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	sock, cancel, done := serveListener(t, &Server{Files: files, Shell: shell})
	c1, conn1 := dialClient(t, sock)
	c2, conn2 := dialClient(t, sock)
	defer conn2.Close()
	if c1.Ready().Backend != BackendContainer || c1.Ready().Version != wire.ProtocolVersion {
		t.Fatalf("ready = %+v", c1.Ready())
	}
	// Both connections number their requests from 1: no crosstalk.
	errs := make(chan error, 2)
	for i, c := range []*wire.Client{c1, c2} {
		go func() {
			for j := 0; j < 20; j++ {
				r, err := c.Bash(context.Background(), wire.BashArgs{Command: "echo " + string(rune('a'+i))}, nil)
				if err == nil && r.Stdout != string(rune('a'+i))+"\n" {
					err = errors.New("crosstalk: " + r.Stdout)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A client that closes its side still gets the answer in flight.
	slow := make(chan error, 1)
	go func() {
		r, err := c1.Bash(context.Background(), wire.BashArgs{Command: "sleep 0.3; echo late"}, nil)
		if err == nil && r.Stdout != "late\n" {
			err = errors.New(r.Stdout)
		}
		slow <- err
	}()
	time.Sleep(100 * time.Millisecond)
	c1.Close(context.Background())
	if err := <-slow; err != nil {
		t.Fatalf("in-flight answer lost: %v", err)
	}
	conn1.Close()
	if _, err := c2.Bash(context.Background(), wire.BashArgs{Command: "true"}, nil); err != nil {
		t.Fatalf("second client broken by the first leaving: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeListener: %v", err)
	}
	if _, err := c2.Bash(context.Background(), wire.BashArgs{Command: "true"}, nil); !errors.Is(err, wire.ErrWorkerExited) {
		t.Fatalf("after shutdown: %v", err)
	}
	if _, err := net.Dial("unix", sock); err == nil {
		t.Fatal("listener still accepting")
	}
}

func TestReadSpecEnv(t *testing.T) {
	spec := Spec{Backend: BackendContainer, Workspace: "/ws", Mode: sandbox.WorkspaceWrite, Container: &ContainerSpec{Socket: "/.vak/run/worker.sock"}}
	data, _ := spec.Encode()
	t.Setenv(SpecEnv, string(data))
	got, _, err := ReadSpecEnv()
	if err != nil || got.Container.Socket != "/.vak/run/worker.sock" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, ok := os.LookupEnv(SpecEnv); ok {
		t.Fatal("the spec stayed in the environment")
	}
	for _, bad := range []string{"", "{", `{"backend":"docker","workspace":"/ws","mode":2}`, `{"backend":"container","workspace":"/ws","mode":2}`} {
		t.Setenv(SpecEnv, bad)
		if _, _, err := ReadSpecEnv(); err == nil {
			t.Errorf("spec %q accepted", bad)
		}
	}
}

// A client that hangs up (closes both sides) with a command in flight gets
// it killed; the same command from a client that only ends its requests
// (half close) runs to its end and is answered.
func TestHangUpKillsInFlight(t *testing.T) {
	ws, shell := listenerShell(t)
	sock, cancel, done := serveListener(t, &Server{Shell: shell})
	defer func() {
		cancel()
		<-done
	}()
	for _, tc := range []struct {
		name   string
		hangUp bool
		sleep  string
	}{
		{"half-close", false, "0.5"},
		{"hang-up", true, "120"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(ws, tc.name+".pid")
			marker := filepath.Join(ws, tc.name+".done")
			cl, conn := dialClient(t, sock)
			defer conn.Close()
			res := make(chan *wire.BashResult, 1)
			errc := make(chan error, 1)
			go func() {
				r, err := cl.Bash(context.Background(), wire.BashArgs{Command: "echo $$ > '" + pidFile + "'; sleep " + tc.sleep + "; touch '" + marker + "'"}, nil)
				res <- r
				errc <- err
			}()
			var pid int
			waitUntil(t, "the command to start", func() bool {
				b, err := os.ReadFile(pidFile)
				if err != nil || len(b) == 0 || b[len(b)-1] != '\n' {
					return false
				}
				pid, err = strconv.Atoi(string(b[:len(b)-1]))
				return err == nil
			})
			if !tc.hangUp {
				cl.Close(context.Background()) // CloseWrite: answers are still read
				if err := <-errc; err != nil {
					t.Fatalf("in-flight answer lost after a half close: %v", err)
				}
				if r := <-res; r.ExitCode != 0 {
					t.Fatalf("exit %d", r.ExitCode)
				}
				if _, err := os.Stat(marker); err != nil {
					t.Fatalf("command did not finish: %v", err)
				}
				return
			}
			conn.Close() // both sides, as when the client is killed
			// The positive control is the half close above: the same
			// command finishes when the client stays.
			waitUntil(t, "the command to be killed", func() bool {
				return syscall.Kill(pid, 0) == syscall.ESRCH
			})
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran to its end after its client hung up")
			}
		})
	}
}
