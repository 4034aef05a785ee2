package taskenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"vak/internal/peercred"
)

// dialWorker connects to the worker socket in a session's run directory
// and proves that the listener is the session container's PID 1 (the
// worker) before anything is sent. The directory is writable by the
// session, so whatever is in it is untrusted: the name is opened without
// following a symlink for the directory, refused unless it is a socket, and
// the peer's credentials (SO_PEERCRED) are checked against the container:
// its cgroup must name the container and its PID in its own namespace must
// be 1. A socket planted by a process of the session, or a symlink to some
// other daemon's socket, fails that check.
func dialWorker(ctx context.Context, runDir, containerID string) (net.Conn, error) {
	dfd, err := unix.Open(runDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open session directory %s: %w", runDir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, socketName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("session socket: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%w: %s/%s is not a socket", ErrUntrustedPeer, runDir, socketName)
	}
	// Through the descriptor the path stays short (sun_path is 108 bytes)
	// and cannot be redirected above the directory.
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(dfd)+"/"+socketName)
	if err != nil {
		return nil, fmt.Errorf("connect to the session's worker: %w", err)
	}
	cred, err := peercred.Get(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", ErrUntrustedPeer, err)
	}
	if err := verifyWorkerPID(cred.PID, containerID); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// verifyWorkerPID checks that host process pid is PID 1 of containerID.
func verifyWorkerPID(pid int, containerID string) error {
	if pid <= 0 {
		return fmt.Errorf("%w: the listener's process is not visible here (vak must run in the Docker daemon's PID namespace)", ErrUntrustedPeer)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return fmt.Errorf("%w: listener process %d: %v", ErrUntrustedPeer, pid, err)
	}
	nspid := ""
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				nspid = f[len(f)-1]
			}
		}
	}
	if nspid != "1" {
		return fmt.Errorf("%w: the socket's listener (host pid %d, pid %s in its namespace) is not the session's worker", ErrUntrustedPeer, pid, nspid)
	}
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil || len(containerID) < 12 || !strings.Contains(string(cg), containerID) {
		return fmt.Errorf("%w: the socket's listener (host pid %d) does not belong to container %.12s", ErrUntrustedPeer, pid, containerID)
	}
	return nil
}
