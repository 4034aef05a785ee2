// Package ondemand runs the per-user gateway of the native fence (the
// landlock backend's proxied network, docs/gateway.md "Native proxied"):
// the first run that needs it starts it, concurrent runs share it, and it
// stops by itself once no run has held it for its idle time (or when `vak
// gc` stops it).
//
// Everything lives in one 0700 directory of the state dir (Layout): the
// admin socket, the data socket (PROXY v2 streams from the sandboxes'
// forwarders), the DNS socket (DNS over TCP framing from their relays) —
// all 0600 and served to peers of the user's own uid only — the pid file,
// the log, and two lock files. A run holds a shared lock on the lease file
// for its lifetime; the gateway exits only while it can hold the lease
// exclusively, so it never goes away under a run, and a run that arrives
// while it exits waits for it to be gone and starts a new one. The start
// lock serialises starts, so concurrent first runs start one gateway.
package ondemand

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"vak/internal/egress/admin"
	"vak/internal/errclass"
)

// DirName is the gateway's directory inside vak's state dir.
const DirName = "gateway-native"

// DefaultIdle is how long the gateway stays up after the last run let go.
const DefaultIdle = 10 * time.Minute

// DefaultStartTimeout bounds the wait for a started gateway to answer.
const DefaultStartTimeout = 20 * time.Second

// Paths are the files of the on-demand gateway.
type Paths struct {
	Dir       string
	Admin     string // admin socket (status, reload, env, CA)
	Data      string // transparent listener: PROXY v2 streams
	DNS       string // resolver: DNS over TCP framing
	Lease     string // shared-locked by every run using the gateway
	StartLock string // serialises starts
	PID       string // the serving process's pid
	Log       string // its stdout and stderr
	Trust     string // public trust files for sandboxes (CA, bundle)
	EnvStamp  string // keyed digests of the secret env the gateway got
}

// Layout returns the paths inside stateDir.
func Layout(stateDir string) Paths {
	d := filepath.Join(stateDir, DirName)
	return Paths{
		Dir:       d,
		Admin:     filepath.Join(d, "admin.sock"),
		Data:      filepath.Join(d, "data.sock"),
		DNS:       filepath.Join(d, "dns.sock"),
		Lease:     filepath.Join(d, "lease"),
		StartLock: filepath.Join(d, "start.lock"),
		PID:       filepath.Join(d, "gateway.pid"),
		Log:       filepath.Join(d, "gateway.log"),
		Trust:     filepath.Join(d, "trust"),
		EnvStamp:  filepath.Join(d, "env.stamp"),
	}
}

// ErrUnavailable: the gateway is not running and could not be started.
var ErrUnavailable = errclass.New(errclass.Unavailable, "the on-demand gateway is unavailable")

// Options configure Acquire.
type Options struct {
	// StateDir is vak's state dir (required).
	StateDir string
	// Command returns the command that serves the gateway in the
	// foreground (`vak gateway serve-native`); required. Its output goes
	// to the log.
	Command func(p Paths) *exec.Cmd
	// StartTimeout bounds the wait for a started gateway; zero means
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// SecretEnv holds this run's values of the environment variables the
	// gateway's env-sourced secrets read (NAME -> value; Command's process
	// inherits them). A gateway started by another run may hold other
	// values: Acquire then restarts it when no run uses it, and otherwise
	// leaves it running and says so in Lease.Warning. Values are only
	// compared through keyed digests; they are never stored or reported.
	SecretEnv map[string]string
}

// Lease is one run's hold on the gateway: it stays up until Release.
type Lease struct {
	Paths
	// Placeholders maps secret names to the placeholders the sandbox gets.
	Placeholders map[string]string
	// CACert is the gateway CA certificate (PEM).
	CACert []byte
	// Warning, when set, is for the user: the running gateway was started
	// with other values of some secret environment variables (named, never
	// their values) and could not be restarted because other runs use it.
	Warning string
	lock    *os.File
}

// Release lets go of the gateway (it stops after its idle time if no other
// run holds it).
func (l *Lease) Release() {
	if l == nil || l.lock == nil {
		return
	}
	now := time.Now()
	os.Chtimes(l.lock.Name(), now, now) // the idle clock starts now
	unix.Flock(int(l.lock.Fd()), unix.LOCK_UN)
	l.lock.Close()
	l.lock = nil
}

// Acquire takes a lease on the user's gateway, starting it if nothing
// answers on its admin socket, and returns what the sandbox needs from it.
// Any failure is ErrUnavailable (nothing must run then).
func Acquire(ctx context.Context, o Options) (*Lease, error) {
	if o.StateDir == "" || o.Command == nil {
		return nil, errors.New("ondemand: StateDir and Command are required")
	}
	p := Layout(o.StateDir)
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := os.Chmod(p.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	l, err := lease(ctx, o, p)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Lease, error) {
		l.Release()
		return nil, err
	}
	// A gateway started by a run with other secret values in its
	// environment serves those: restart it if no other run holds it.
	if stale := staleEnv(p, o.SecretEnv); len(stale) > 0 {
		l.Release()
		stopped, err := Stop(ctx, o.StateDir)
		if err != nil && !errors.Is(err, ErrInUse) {
			return nil, fmt.Errorf("%w: restart for new secret values: %v", ErrUnavailable, err)
		}
		if l, err = lease(ctx, o, p); err != nil {
			return nil, err
		}
		if stale = staleEnv(p, o.SecretEnv); len(stale) > 0 {
			why := "other runs use it"
			if stopped {
				why = "another run restarted it first"
			}
			l.Warning = fmt.Sprintf("the on-demand gateway was started with other values of %s than this run's environment has, and %s, so it was not restarted: this run's requests get the gateway's values; 'vak gc' restarts it once no run uses it", strings.Join(stale, ", "), why)
		}
	}
	c := admin.NewClient(p.Admin)
	// A gateway started by an earlier run picks up config changes.
	if err := c.Reload(ctx); err != nil {
		return fail(fmt.Errorf("%w: reload %s: %v", ErrUnavailable, p.Admin, err))
	}
	if l.Placeholders, err = c.Env(ctx); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	if l.CACert, err = c.CACert(ctx); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrUnavailable, err))
	}
	return l, nil
}

// lease takes a shared hold on the lease file and makes sure a gateway
// answers (starting one with o's command).
func lease(ctx context.Context, o Options, p Paths) (*Lease, error) {
	lock, err := lockFile(ctx, p.Lease, unix.LOCK_SH)
	if err != nil {
		return nil, fmt.Errorf("%w: lease %s: %v", ErrUnavailable, p.Lease, err)
	}
	l := &Lease{Paths: p, lock: lock}
	if err := ensure(ctx, o, p); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// ensure starts the gateway unless one answers.
func ensure(ctx context.Context, o Options, p Paths) error {
	if alive(ctx, p) {
		return nil
	}
	start, err := lockFile(ctx, p.StartLock, unix.LOCK_EX)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer start.Close() // unlocks
	if alive(ctx, p) {
		return nil // another run started it meanwhile
	}
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer logf.Close()
	// The stamp describes the environment the gateway about to start
	// inherits (written under the start lock, before it starts).
	if err := writeEnvStamp(p.EnvStamp, o.SecretEnv); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	cmd := o.Command(p)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, logf, logf
	// Its own session: the user's Ctrl-C at the run that started it must
	// not stop the gateway other runs share.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: start %s: %v", ErrUnavailable, cmd.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("%w: the gateway exited at start (%v): %s", ErrUnavailable, err, logTail(p.Log))
		case <-deadline.C:
			cmd.Process.Kill()
			return fmt.Errorf("%w: the gateway did not answer on %s within %v: %s", ErrUnavailable, p.Admin, timeout, logTail(p.Log))
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
		case <-tick.C:
			if alive(ctx, p) {
				return nil
			}
		}
	}
}

// alive says whether a gateway answers on the admin socket.
func alive(ctx context.Context, p Paths) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := admin.NewClient(p.Admin).Status(ctx)
	return err == nil
}

// logTail is the end of the gateway's log, for errors.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "no log"
	}
	b = bytes.TrimSpace(b)
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	if len(b) == 0 {
		return "empty log " + path
	}
	return strings.ReplaceAll(string(b), "\n", "; ")
}

// lockFile opens path (0600) and flocks it with how, waiting until ctx
// ends.
func lockFile(ctx context.Context, path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitIdle is the gateway's side: it returns once no run has held the
// lease for idle, holding the lease exclusively (so no run starts to use
// the gateway while it stops; the lock goes with the process), or nil when
// ctx ends first. poll is how often it looks.
func WaitIdle(ctx context.Context, p Paths, idle, poll time.Duration) *os.File {
	f, err := os.OpenFile(p.Lease, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil
	}
	var freeSince time.Time
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.Close()
			return nil
		case <-t.C:
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			freeSince = time.Time{} // a run holds it
			continue
		}
		now := time.Now()
		if freeSince.IsZero() {
			freeSince = now
		}
		if fi, err := f.Stat(); err == nil && fi.ModTime().After(freeSince) && !fi.ModTime().After(now) {
			freeSince = fi.ModTime() // a run let go since the last look
		}
		if now.Sub(freeSince) >= idle {
			return f
		}
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
	}
}

// WritePID records the serving process (for Stop).
func WritePID(p Paths) error {
	return os.WriteFile(p.PID, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
}

// Stop stops the gateway if no run holds it: it reports whether one was
// stopped, and ErrInUse when runs hold it.
func Stop(ctx context.Context, stateDir string) (bool, error) {
	p := Layout(stateDir)
	if _, err := os.Stat(p.Dir); err != nil {
		return false, nil
	}
	f, err := os.OpenFile(p.Lease, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, ErrInUse
	}
	if !alive(ctx, p) {
		return false, nil
	}
	b, err := os.ReadFile(p.PID)
	if err != nil {
		return false, fmt.Errorf("ondemand: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return false, fmt.Errorf("ondemand: bad pid file %s", p.PID)
	}
	if err := unix.Kill(pid, unix.SIGTERM); err != nil {
		return false, fmt.Errorf("ondemand: stop gateway (pid %d): %w", pid, err)
	}
	for alive(ctx, p) {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true, nil
}

// ErrInUse: runs hold the gateway.
var ErrInUse = errors.New("ondemand: the gateway is in use by running sandboxes")
