package taskenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
)

// holdLock takes the exclusive lock of a watch directory (path is its lock
// file) for as long as the returned file is open; ok is false when another
// process holds it.
func holdLock(path string) (f *os.File, ok bool, err error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), true, nil
}

// lockHeld reports whether a process holds the lock file path (a running
// watcher): one open and one flock, cheap enough for every exec.
func lockHeld(path string) (bool, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return true, nil
		}
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	return false, nil
}

// killAndWait kills container name (SIGKILL) and waits until it is not
// running; it reports whether it is gone or stopped.
func killAndWait(ctx context.Context, cli *client.Client, name string) bool {
	if _, err := cli.ContainerKill(ctx, name, client.ContainerKillOptions{Signal: "KILL"}); err != nil && cerrdefs.IsNotFound(err) {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w := cli.ContainerWait(ctx, name, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
		return true
	case err := <-w.Error:
		return cerrdefs.IsNotFound(err)
	}
}
