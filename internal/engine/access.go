package engine

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrSocketPermission reports a Docker daemon socket this user may not
// connect to: the fix is the socket's group, which the error names.
var ErrSocketPermission = errors.New("permission denied on the Docker daemon's socket")

// DefaultHost is the daemon's address without DOCKER_HOST.
const DefaultHost = "unix:///var/run/docker.sock"

// EnvHost is the daemon address of the environment, as the Engine API
// client's FromEnv takes it: DOCKER_HOST, else DefaultHost.
func EnvHost() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return DefaultHost
}

// Unreachable explains a failed attempt (cause) to reach the Docker daemon
// at host, a DOCKER_HOST address ("" when unknown, e.g. a CLI context): it
// is vak's one engine-access check, behind the backend's probe, doctor,
// sessions and nested Docker alike. The error wraps ErrDaemonUnavailable;
// when host is a unix socket this user may not connect to (a real
// connect, not the wording of cause), it is ErrSocketPermission's
// "permission denied on SOCKET: add USER to the GROUP group ..." instead
// of cause, whatever client failed and however it said so.
func Unreachable(host string, cause error) error {
	if err := SocketAccess(host); err != nil {
		return fmt.Errorf("%w: %w", ErrDaemonUnavailable, err)
	}
	return fmt.Errorf("%w: %w", ErrDaemonUnavailable, cause)
}

// SocketAccess returns an error wrapping ErrSocketPermission when host is
// a unix socket this user may not connect to, naming the socket and the
// fix: the user and the group to join (when the socket's group may
// connect), else that only its owner may. It is nil otherwise (also when
// host is not a unix socket, or the connection fails for another reason).
func SocketAccess(host string) error {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok || path == "" {
		return nil
	}
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err == nil {
		c.Close()
		return nil
	}
	if !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EPERM) {
		return nil
	}
	who := "uid " + strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	fix := socketFix(path, who)
	if fix == "" {
		fix = "add " + who + " to the socket's group"
	}
	return &socketError{path: path, msg: fix}
}

// socketError is SocketAccess's error.
type socketError struct{ path, msg string }

func (e *socketError) Error() string { return "permission denied on " + e.path + ": " + e.msg }

func (e *socketError) Unwrap() []error { return []error{ErrSocketPermission, os.ErrPermission} }
