//go:build linux

package keeper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"vak/internal/fsguard"
	"vak/internal/hostenv"
	"vak/internal/paths"
	"vak/internal/peercred"
)

// poll is how often an idle keeper checks that it is still wanted.
const poll = time.Second

// Deadlines of one question: reading it (the keeper) and the whole
// exchange (the run; a keeper whose watch overflowed walks again first).
const (
	readTimeout = 5 * time.Second
	scanTimeout = 30 * time.Second
	maxAnswer   = 64 << 20
)

// request is a run's question, one JSON line.
type request struct {
	Protocol string `json:"protocol"`
	// Workspace, Dev and Ino are the run's workspace: its path and what
	// the run's own descriptor of it is. A keeper whose descriptor is of
	// another directory answers with an error and leaves.
	Workspace string `json:"workspace"`
	Dev       uint64 `json:"dev"`
	Ino       uint64 `json:"ino"`
	// Setuid asks for the files that gained the setuid or setgid bit
	// (fsguard.NewChangeWatch).
	Setuid bool `json:"setuid"`
}

// answer is a keeper's answer, one JSON line.
type answer struct {
	Protocol string        `json:"protocol"`
	PID      int           `json:"pid"`
	Scan     *fsguard.Scan `json:"scan,omitempty"`
	// Err says why there is no Scan.
	Err string `json:"err,omitempty"`
}

// Serve is the keeper of canonical workspace ws on socket sock (Socket).
// It returns nil when it leaves for one of the reasons the package
// comment lists, or at once when another keeper holds the socket's lock
// file or the socket's directory is gone; an error when it could not
// start (the workspace could not be watched, the socket's directory is
// not private). ready, if set, is called once it listens.
func Serve(ctx context.Context, ws, sock string, idle time.Duration, ready func()) error {
	lock, err := takeLock(sock)
	if lock == nil || err != nil {
		return err
	}
	defer lock.Close()
	t, err := fsguard.OpenTree(ws)
	if err != nil {
		return err
	}
	defer t.Close()
	dev, ino, err := t.Root()
	if err != nil {
		return err
	}
	w := fsguard.NewChangeWatch(ws)
	defer w.Close()
	if _, err := w.Scan(t, false); err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	if err := w.Err(); err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	k := &keeper{ws: ws, sock: sock, lock: lock, t: t, w: w, dev: dev, ino: ino}
	if !k.wanted() {
		return nil // removed while the watch was built
	}
	os.Remove(sock) // a dead keeper's: the lock is ours
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	l.SetUnlinkOnClose(false)
	defer l.Close()
	if k.sockID, err = fileID(sock); err != nil {
		return fmt.Errorf("keeper: %w", err)
	}
	defer k.removeSocket()
	if ready != nil {
		ready()
	}
	return k.serve(ctx, l, idle)
}

// keeper is one Serve.
type keeper struct {
	ws, sock string
	lock     *os.File
	t        *fsguard.Tree
	w        *fsguard.Watch
	dev, ino uint64
	sockID   [2]uint64
}

func (k *keeper) serve(ctx context.Context, l *net.UnixListener, idle time.Duration) error {
	last := time.Now()
	for {
		if ctx.Err() != nil || time.Since(last) > idle || !k.wanted() {
			return nil
		}
		l.SetDeadline(time.Now().Add(poll))
		c, err := l.AcceptUnix()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("keeper: %w", err)
		}
		last = time.Now()
		stay := k.answer(c)
		c.Close()
		if !stay {
			return nil
		}
	}
}

// wanted says the keeper's lock file and socket are still its own and the
// workspace path still leads to the directory it watches.
func (k *keeper) wanted() bool {
	if !isFileAt(k.lock, k.sock+".lock") {
		return false
	}
	if k.sockID != [2]uint64{} {
		if id, err := fileID(k.sock); err != nil || id != k.sockID {
			return false
		}
	}
	id, err := fileID(k.ws)
	return err == nil && id == [2]uint64{k.dev, k.ino}
}

func (k *keeper) removeSocket() {
	if id, err := fileID(k.sock); err == nil && id == k.sockID {
		os.Remove(k.sock)
	}
}

// answer answers one question on c and says whether the keeper stays.
func (k *keeper) answer(c *net.UnixConn) (stay bool) {
	cred, err := peercred.Get(c)
	if err != nil || cred.UID != os.Getuid() {
		return true // not its user's: no answer
	}
	c.SetDeadline(time.Now().Add(readTimeout))
	var req request
	line, err := bufio.NewReader(io.LimitReader(c, 64<<10)).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &req) != nil || req.Protocol != protocol {
		return true
	}
	a := answer{Protocol: protocol, PID: os.Getpid()}
	stay = true
	switch {
	case req.Workspace != k.ws:
		a.Err = fmt.Sprintf("this keeper watches %s, not %s", k.ws, req.Workspace)
	case req.Dev != k.dev || req.Ino != k.ino || !k.wanted():
		a.Err = "the workspace directory is another one than the keeper watches"
		stay = false
	default:
		sc, err := k.w.Scan(k.t, req.Setuid)
		if err == nil {
			err = k.w.Err()
		}
		if err != nil {
			// The watch gave up (Scan walked instead): the run walks
			// for itself, and the keeper has nothing left to keep.
			a.Err, stay = err.Error(), false
		} else {
			a.Scan = &sc
		}
	}
	c.SetDeadline(time.Now().Add(scanTimeout))
	b, _ := json.Marshal(a)
	c.Write(append(b, '\n'))
	return stay
}

// takeLock opens and locks sock's lock file in the private directory
// Start made. It returns nil, nil when another keeper holds the lock, or
// when the directory or the lock file is gone (whoever removed them wants
// no keeper).
func takeLock(sock string) (*os.File, error) {
	f, err := openLock(sock, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("keeper: lock %s.lock: %w", sock, err)
	}
	if !isFileAt(f, sock+".lock") {
		f.Close()
		return nil, nil
	}
	return f, nil
}

// openLock opens sock's lock file, creating it, and with mkdir the
// private directory it lives in.
func openLock(sock string, mkdir bool) (*os.File, error) {
	dir := filepath.Dir(sock)
	if mkdir {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("keeper: %w", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return nil, fmt.Errorf("keeper: %w", &os.PathError{Op: "lstat", Path: dir, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Getuid()) || st.Mode&0o077 != 0 {
		return nil, fmt.Errorf("keeper: %s must be a directory of yours that only you can use (mode %04o)", dir, st.Mode&0o7777)
	}
	f, err := os.OpenFile(sock+".lock", os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	return f, nil
}

// isFileAt says the open file f is the one path names (not removed or
// replaced since it was opened).
func isFileAt(f *os.File, path string) bool {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	id, err := fileID(path)
	return err == nil && id == [2]uint64{st.Dev, st.Ino}
}

func fileID(p string) ([2]uint64, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return [2]uint64{}, err
	}
	return [2]uint64{st.Dev, st.Ino}, nil
}

// Scan asks the keeper on sock what Tree.Scan(setuid) of t's workspace
// would say now. Any error (ErrNoKeeper, ErrUntrusted, or the keeper's
// own) means the caller scans without it.
func Scan(sock string, t *fsguard.Tree, setuid bool) (Result, error) {
	dev, ino, err := t.Root()
	if err != nil {
		return Result{}, err
	}
	c, pid, err := dial(sock)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(scanTimeout))
	b, _ := json.Marshal(request{Protocol: protocol, Workspace: t.Path(), Dev: dev, Ino: ino, Setuid: setuid})
	if _, err := c.Write(append(b, '\n')); err != nil {
		return Result{}, fmt.Errorf("keeper (pid %d): %w", pid, err)
	}
	line, err := bufio.NewReader(io.LimitReader(c, maxAnswer)).ReadBytes('\n')
	if err != nil {
		return Result{}, fmt.Errorf("keeper (pid %d): no answer: %w", pid, err)
	}
	var a answer
	if err := json.Unmarshal(line, &a); err != nil {
		return Result{}, fmt.Errorf("keeper (pid %d): bad answer: %w", pid, err)
	}
	switch {
	case a.Protocol != protocol:
		return Result{}, fmt.Errorf("keeper (pid %d): answered in protocol %q", pid, a.Protocol)
	case a.Err != "":
		return Result{}, fmt.Errorf("keeper (pid %d): %s", pid, a.Err)
	case a.Scan == nil:
		return Result{}, fmt.Errorf("keeper (pid %d): answered without a scan", pid)
	}
	return Result{Scan: *a.Scan, PID: pid}, nil
}

// dial connects to the keeper on sock and checks that it is trusted.
func dial(sock string) (net.Conn, int, error) {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, 0, fmt.Errorf("%w on %s", ErrNoKeeper, sock)
		}
		return nil, 0, fmt.Errorf("keeper: %w", err)
	}
	pid, err := trusted(c)
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	return c, pid, nil
}

// trusted checks that the process listening on c is this user's, in this
// process's mount and user namespaces (no sandboxed process is), and
// returns its pid.
func trusted(c net.Conn) (int, error) {
	cred, err := peercred.Get(c)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	if cred.UID != os.Getuid() {
		return 0, fmt.Errorf("%w: pid %d runs as uid %d, not %d", ErrUntrusted, cred.PID, cred.UID, os.Getuid())
	}
	if cred.PID <= 0 {
		return 0, fmt.Errorf("%w: its process is in another pid namespace", ErrUntrusted)
	}
	for _, ns := range []string{"mnt", "user"} {
		mine, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrUntrusted, err)
		}
		theirs, err := os.Readlink("/proc/" + strconv.Itoa(cred.PID) + "/ns/" + ns)
		if err != nil || theirs != mine {
			return 0, fmt.Errorf("%w: pid %d is in another %s namespace", ErrUntrusted, cred.PID, ns)
		}
	}
	return cred.PID, nil
}

// socketFor is SocketOf(ws), an error where there is none.
func socketFor(ws string) (string, error) {
	if sock := SocketOf(ws); sock != "" {
		return sock, nil
	}
	return "", fmt.Errorf("keeper: no socket for %s: vak's state directory is unknown or its path too long", ws)
}

// Run is `vak __keep-watch WORKSPACE`: Serve on SocketOf(ws) for Idle,
// until SIGTERM or SIGINT.
func Run(ctx context.Context, ws string) error {
	sock, err := socketFor(ws)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, unix.SIGTERM, unix.SIGINT)
	defer stop()
	return Serve(ctx, ws, sock, Idle, nil)
}

// Start starts a keeper of canonical workspace ws, running exe (a vak
// binary) as `exe __keep-watch ws`, detached: its own session, no
// terminal, the root directory, and of this process's environment only
// what names the state directory (HOME, XDG_STATE_HOME). It returns 0
// and no error when a keeper already holds the socket's lock (running or
// still building its watch).
func Start(exe, ws string) (pid int, err error) {
	sock, err := socketFor(ws)
	if err != nil {
		return 0, err
	}
	f, err := openLock(sock, true)
	if err != nil {
		return 0, err
	}
	held := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
	f.Close() // lets go of the lock, if this took it
	if held {
		return 0, nil
	}
	cmd := exec.Command(exe, Command, ws)
	cmd.Dir = "/"
	cmd.Env = hostenv.Lookup([]string{"HOME", paths.EnvStateHome})
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("keeper: start %s: %w", exe, err)
	}
	go cmd.Wait()
	return cmd.Process.Pid, nil
}

// Running returns the pid of the keeper of canonical workspace ws, or 0
// when none holds its lock (a keeper still building its watch holds it
// too, and has no socket yet: its pid is then unknown, -1).
func Running(ws string) (pid int, err error) {
	sock := SocketOf(ws)
	if sock == "" {
		return 0, nil
	}
	f, err := os.Open(sock + ".lock")
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("keeper: %w", err)
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == nil {
		return 0, nil
	}
	c, pid, err := dial(sock)
	if errors.Is(err, ErrUntrusted) {
		return 0, err
	}
	if err != nil {
		return -1, nil // still building its watch: no socket yet
	}
	c.Close()
	return pid, nil
}
