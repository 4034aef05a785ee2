package engine

import (
	"context"
	"fmt"
	"os"

	"github.com/moby/moby/client"

	"vak/internal/errclass"
)

// Client is the Engine API client.
type Client = client.Client

// ErrDaemonUnavailable reports that no Docker daemon answered (or this user
// may not use it). Commands fail with it; they never fall back to running on
// the host.
var ErrDaemonUnavailable = errclass.New(errclass.Unavailable, "docker daemon unavailable")

// ErrUnsupported reports a feature this host cannot provide (a seccomp
// profile off Linux, an owner token without /proc).
var ErrUnsupported = errclass.New(errclass.Unavailable, "unsupported on this host")

// New returns an Engine API client configured from the environment
// (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, DOCKER_API_VERSION).
// It negotiates the API version with the daemon on its first request and
// connects to nothing before. An environment it cannot use (a malformed
// DOCKER_HOST, unreadable certificates) is an error wrapping
// ErrDaemonUnavailable that names the address.
func New() (*Client, error) {
	c, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDaemonUnavailable, EnvHost(), err)
	}
	return c, nil
}

// APIError maps an error of an Engine API call (what, e.g. "create
// container X") made through a client of New: a failed connection is
// Unreachable's error (wrapping ErrDaemonUnavailable, naming the socket
// and, for a socket this user may not use, the group to join); any other
// error is returned wrapped as it is. nil stays nil.
func APIError(what string, err error) error {
	if err == nil {
		return nil
	}
	if client.IsErrConnectionFailed(err) {
		err = Unreachable(EnvHost(), err)
	}
	if what == "" {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

// CheckAccess reports, before anything is built or started, a user who
// cannot use the daemon cli talks to: the error is Unreachable's (wrapping
// ErrDaemonUnavailable; a socket the user may not connect to names the user
// and the group to join). purpose, if not empty, says what needs the daemon
// (e.g. "nested Docker, --docker, starts its engine through the host's
// Docker daemon") and is added with the daemon's address and this uid.
func CheckAccess(ctx context.Context, cli *Client, purpose string) error {
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		err = Unreachable(cli.DaemonHost(), err)
		if purpose == "" {
			return err
		}
		return fmt.Errorf("%w (%s at %s, as uid %d)", err, purpose, cli.DaemonHost(), os.Getuid())
	}
	return nil
}
