package worker

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// pollable returns in as a file the Go runtime polls, when in is a pipe or
// a socket (the worker's request stream): a duplicate of its descriptor in
// non-blocking mode. A blocking read parks a thread in the kernel, and
// every request then wakes that thread and, for the request's goroutine,
// a second one; a polled read wakes one. Anything else (a terminal, a
// file, a reader that is no file) is returned as it is.
func pollable(in io.Reader) io.Reader {
	f, ok := in.(*os.File)
	if !ok {
		return in
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return in
	}
	if kind := st.Mode & unix.S_IFMT; kind != unix.S_IFIFO && kind != unix.S_IFSOCK {
		return in
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return in
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return in
	}
	return os.NewFile(uintptr(fd), f.Name())
}
