package procfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Stat reads one process. The landlock backend's setsid supervisor calls
// it while a command being started waits (see landlock.Supervise), so it
// reads with three system calls into a buffer of its own rather than
// through os.ReadFile (which also stats the file and registers it with the
// poller).
func Stat(pid int) (Proc, error) {
	name := "/proc/" + strconv.Itoa(pid) + "/stat"
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for err == syscall.EINTR {
		fd, err = syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		return Proc{}, &os.PathError{Op: "open", Path: name, Err: err}
	}
	var buf [4096]byte
	n, err := syscall.Read(fd, buf[:])
	for err == syscall.EINTR {
		n, err = syscall.Read(fd, buf[:])
	}
	syscall.Close(fd)
	if err != nil {
		return Proc{}, &os.PathError{Op: "read", Path: name, Err: err}
	}
	if n == len(buf) {
		// Longer than any stat line: read it whole the slow way.
		data, err := os.ReadFile(name)
		if err != nil {
			return Proc{}, err
		}
		return parse(pid, string(data))
	}
	return parse(pid, string(buf[:n]))
}

// All lists the processes visible in /proc (those that vanish while it
// reads are skipped).
func All() []Proc {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]Proc, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, err := Stat(pid); err == nil {
			out = append(out, p)
		}
	}
	return out
}

var errMalformed = errors.New("procfs: malformed stat line")

// Tgid returns the process (thread group) of the thread tid: a session a
// thread makes with setsid is its process's.
func Tgid(tid int) (int, error) {
	name := "/proc/" + strconv.Itoa(tid) + "/status"
	data, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	n, err := parseTgid(string(data))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}

var errNoTgid = errors.New("procfs: no Tgid line")

// parseTgid reads the Tgid line of a status file. Its first line is the
// command's name, which the process chooses, but the kernel escapes a
// newline in it: no line but the kernel's starts with "Tgid:".
func parseTgid(status string) (int, error) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
				return n, nil
			}
			break
		}
	}
	return 0, errNoTgid
}

// parse reads "pid (comm) state ppid pgrp session ...". The command name is
// in parentheses and may contain anything, spaces and ')' included, so the
// fields are taken after the last ')'.
func parse(pid int, s string) (Proc, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Proc{}, errMalformed
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return Proc{}, errMalformed
	}
	ppid, err1 := strconv.Atoi(f[1])
	sid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return Proc{}, errMalformed
	}
	return Proc{PID: pid, PPID: ppid, SID: sid, State: f[0][0]}, nil
}
