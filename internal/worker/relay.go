package worker

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"vak/internal/peercred"
)

// Relay mode: a session whose worker the host cannot reach over a socket
// of its own (a Kubernetes pod: the worker's socket is in the pod) is
// reached by running `vak __worker-relay` in the worker's container
// through the orchestrator's exec stream. The relay connects to the
// worker's socket, checks that the process serving it is the container's
// PID 1 (the worker: a session's commands are its descendants and can
// never be PID 1, so a socket they replaced is refused), and copies the
// stream both ways. One relay, one long-lived connection: every command of
// the connection costs a round trip on the stream, not a new exec.

// RelayCommand is the hidden vak subcommand of relay mode.
const RelayCommand = "__worker-relay"

// InstallCommand is the hidden vak subcommand that copies this binary to
// a path (a session pod's init container puts vak where the workload
// container runs it from, without a registry image of its own).
const InstallCommand = "__install-worker"

// ErrRelayPeer reports a worker socket not served by the container's PID 1.
var ErrRelayPeer = errors.New("worker relay: the session socket is not served by the session's worker (PID 1)")

// Relay connects to the worker socket at socket and copies in to it and
// its answers to out until the worker closes the connection. When in ends,
// only the sending half is closed, so answers in flight still arrive.
func Relay(socket string, in io.Reader, out io.Writer) error {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return fmt.Errorf("worker relay: %w", err)
	}
	defer c.Close()
	cred, err := peercred.Get(c)
	if err != nil {
		return fmt.Errorf("worker relay: %w", err)
	}
	if cred.PID != 1 {
		return fmt.Errorf("%w: %s is served by PID %d", ErrRelayPeer, socket, cred.PID)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, in)
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- err
	}()
	if _, err := io.Copy(out, c); err != nil {
		return fmt.Errorf("worker relay: %w", err)
	}
	return nil
}

// Install copies this executable to dst (mode 0555), through a temporary
// file in dst's directory renamed into place.
func Install(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install worker: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install worker: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".vak-install-*")
	if err != nil {
		return fmt.Errorf("install worker: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install worker: copy to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return fmt.Errorf("install worker: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install worker: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install worker: %w", err)
	}
	return nil
}
