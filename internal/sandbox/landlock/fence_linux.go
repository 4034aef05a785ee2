package landlock

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

var _ interface{ FenceNetwork() error } = (*Backend)(nil)

var errNoFenceServer = errors.New("this program has no fence server (landlock.WorkerEntry was given none)")

// FenceNetwork implements sandbox.FenceProvider: the fence needs the
// sandbox's own network namespace, so user namespaces must work.
func (b *Backend) FenceNetwork() error {
	st := b.Status()
	if st.Problem != "" && !st.Weaker {
		return fmt.Errorf("%w: %s", ErrUnavailable, st.Problem)
	}
	if !st.UserNS {
		return fmt.Errorf("%w: the proxied network needs user namespaces (the sandbox's own network namespace)", ErrUnavailable)
	}
	return nil
}

// openPath opens path as an O_PATH descriptor (a handle on a socket file
// that can be connected to later through /proc/self/fd).
func openPath(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// dialFD connects to the unix socket held by the O_PATH descriptor fd.
func dialFD(fd int) func(ctx context.Context) (net.Conn, error) {
	path := "/proc/self/fd/" + strconv.Itoa(fd)
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}

// startFence is stage 1's part of the proxied network: it fences the
// namespace and serves the forwarder and DNS relay for as long as stage 1
// lives (it holds CAP_NET_ADMIN over the namespace; stage 2 and the
// commands never do).
func startFence(f *FenceSpec, fence FenceServer) (func(), error) {
	if fence == nil {
		return nil, fmt.Errorf("landlock: proxied network: %w", errNoFenceServer)
	}
	stop, err := fence(dialFD(f.DataFD), dialFD(f.DNSFD), log.New(os.Stderr, "vak: proxied network: ", 0))
	if err != nil {
		return nil, fmt.Errorf("landlock: proxied network: %w", err)
	}
	return stop, nil
}

// checkFenceFDs checks, inside the view, that the gateway's sockets are
// reachable through /proc/self/fd.
func checkFenceFDs(f *FenceSpec) error {
	for _, fd := range []int{f.DataFD, f.DNSFD} {
		fi, err := os.Stat("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("landlock: proxied network: the gateway socket (descriptor %d) is not reachable through /proc/self/fd in the sandbox (is /proc mounted?): %v", fd, err)
		}
	}
	return nil
}
