package worker

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// watchHangUp calls hungUp once c's peer has closed the connection
// entirely, not only its sending side, until stop is called. A client ends
// its requests with a half close (CloseWrite) and still reads the answers
// in flight; a client that exits or is killed closes both sides, and then
// nobody will read what its commands print: they are canceled rather than
// left running in the session. A Unix stream socket reports POLLHUP only
// for the full close (a half close is POLLRDHUP), which poll waits for with
// no events requested. Other connections (pipes, where end of input and
// hang-up are the same event) are not watched; stop is then a no-op.
func watchHangUp(c any, hungUp func()) (stop func()) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return func() {}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return func() {}
	}
	fd := -1
	raw.Control(func(s uintptr) {
		fd, _ = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 3)
	})
	if fd < 0 {
		return func() {}
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		defer unix.Close(wake)
		fds := []unix.PollFd{{Fd: int32(fd)}, {Fd: int32(wake), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err == nil && fds[1].Revents == 0 && fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
				hungUp()
			}
			return
		}
	}()
	return func() {
		unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		<-done
	}
}
