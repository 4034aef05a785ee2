package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"vak/internal/fsguard"
	"vak/internal/hostenv"
	"vak/internal/procfs"
	"vak/internal/worker/wire"
)

// RunContainer is a session container's entrypoint. It serves the protocol
// on in/out (the broker's attached stdio) and on the unix socket
// spec.Container.Socket; it runs every command under the reap shim (so a
// timeout kills the whole tree), reaps orphans as the container's PID 1, and
// makes itself non-dumpable so the session's processes, which share its
// uid, cannot ptrace it or read its memory.
//
// The end of stdin does not end the worker (the creating broker may go
// away; later clients use the socket). It returns ErrIdle or ErrDeadline
// when the session's idle timeout or maximum lifetime passes, nil when ctx
// ends (SIGTERM), or the error that stopped the listener. Its return ends
// the container and every process in it.
func RunContainer(ctx context.Context, spec *Spec, desc string, in io.Reader, out io.Writer) error {
	cs := spec.Container
	if cs == nil || cs.Socket == "" {
		return errors.New("worker: container spec lacks a socket")
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("worker: make non-dumpable: %w", err)
	}
	if err := checkMounts(cs.Mounts); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("worker: find own binary: %w", err)
	}
	files, err := OpenFiles(spec.Workspace, spec.Mode, spec.Protected)
	if err != nil {
		return err
	}
	defer files.Close()
	env := spec.Env
	if cs.InheritEnv {
		env = os.Environ()
		for _, kv := range spec.Env {
			env = hostenv.Set(env, kv)
		}
	}
	reg := newChildRegistry()
	// Every command of the session, and every inner container of a
	// --docker session, runs on this kernel: the tripwire can keep its
	// walk current instead of repeating it.
	watch := fsguard.NewWatch(spec.Workspace)
	defer watch.Close()
	shell := &Exec{
		Workspace:      spec.Workspace,
		Env:            env,
		DefaultTimeout: spec.DefaultTimeout,
		Protected:      spec.Protected,
		Watch:          watch,
		Launcher:       []string{self, ReapCommand, "--"},
		Subreaper:      true,
		reg:            reg,
		warm:           newWarmShims(self, reg),
	}
	// The directory is the broker's per-session directory; anything in it
	// was left by an earlier worker of this container or by the session.
	os.Remove(cs.Socket)
	ln, err := net.Listen("unix", cs.Socket)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := os.Chmod(cs.Socket, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("worker: %w", err)
	}
	act := &activity{last: time.Now(), touch: cs.Socket}
	ready := wire.Event{Backend: BackendContainer, Sandbox: desc, PID: os.Getpid()}
	newServer := func() *Server {
		return &Server{Files: &trackedFiles{files, act}, Shell: &trackedShell{shell, act}, Ready: ready}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go reapOrphans(ctx, reg)
	lnDone := make(chan error, 1)
	go func() { lnDone <- ServeListener(ctx, ln, newServer) }()
	go newServer().Serve(ctx, in, out)

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-lnDone:
			if err == nil {
				return nil
			}
			return fmt.Errorf("worker: socket: %w", err)
		case now := <-tick.C:
			if !cs.Deadline.IsZero() && !now.Before(cs.Deadline) {
				return ErrDeadline
			}
			if cs.IdleTimeout > 0 && act.idle(now) >= cs.IdleTimeout {
				return ErrIdle
			}
		}
	}
}

// checkMounts returns ErrMountReplaced unless each mount is the file or
// directory the broker checked: by device and inode, or by its Attrs.
func checkMounts(mounts []MountIdentity) error {
	for _, m := range mounts {
		var st unix.Stat_t
		if err := unix.Lstat(m.Path, &st); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrMountReplaced, m.Path, err)
		}
		if m.Attrs != nil {
			got := StatAttrs(&st)
			if got != *m.Attrs {
				return fmt.Errorf("%w: %s has attributes %+v, expected %+v (was it replaced, or changed on the host, while the session was created? create it again); refusing to serve", ErrMountReplaced, m.Path, got, *m.Attrs)
			}
			continue
		}
		if uint64(st.Dev) != m.Dev || uint64(st.Ino) != m.Ino || st.Mode&unix.S_IFMT != m.Type {
			return fmt.Errorf("%w: %s is device %d inode %d type %#o, expected %d/%d type %#o (was it replaced while the session was created?); refusing to serve", ErrMountReplaced, m.Path, st.Dev, st.Ino, st.Mode&unix.S_IFMT, m.Dev, m.Ino, m.Type)
		}
	}
	return nil
}

// LstatIdentity is the MountIdentity of path as it is now, from one lstat
// (a final symlink is not followed), with its Attrs when attrs is set.
func LstatIdentity(path string, attrs bool) (MountIdentity, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return MountIdentity{}, err
	}
	id := MountIdentity{Path: path, Dev: uint64(st.Dev), Ino: uint64(st.Ino), Type: st.Mode & unix.S_IFMT}
	if attrs {
		a := StatAttrs(&st)
		id.Attrs = &a
	}
	return id, nil
}

// StatAttrs are st's FileAttrs.
func StatAttrs(st *unix.Stat_t) FileAttrs {
	return FileAttrs{
		Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size, Nlink: uint64(st.Nlink),
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
	}
}

// reapOrphans waits for zombies that were re-parented to the worker (PID 1
// of the container), skipping the commands os/exec itself waits for.
func reapOrphans(ctx context.Context, reg *childRegistry) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	self := os.Getpid()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			// Coalesce a burst of exits into one scan.
			time.Sleep(20 * time.Millisecond)
		case <-tick.C:
		}
		reg.mu.Lock()
		for _, p := range procfs.All() {
			if p.PPID == self && p.State == 'Z' && !reg.pids[p.PID] {
				var ws syscall.WaitStatus
				syscall.Wait4(p.PID, &ws, syscall.WNOHANG, nil)
			}
		}
		reg.mu.Unlock()
	}
}
