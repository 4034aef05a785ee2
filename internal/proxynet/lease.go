package proxynet

// The lease of a topology: who may look at, build, use and remove it.
//
// One user's commands work on a workspace's topology at once: runs and
// session creates bring it up or reuse it, and runs, `vak session rm` and
// `vak gc` remove it when nothing uses it. "Nothing uses it" cannot be read
// from the daemon alone: a command that has just brought the topology up
// (or found it up) has not created its sandbox container yet, and a
// removal in that window took the networks from under it. So every command
// that uses a topology holds its lease, shared, from before it looks at
// the topology (Ensure) until its sandbox containers exist (they carry
// LabelClientOf, which keeps the topology from then on) or, for `vak run`,
// until its command ended (Net.Release); a removal holds the lease
// exclusively, and only tries: a topology whose lease is held is in use.
//
// The lease is two lock files in the user's state dir, per topology key
// (stateDir/proxynet/KEY), held with flock(2): the kernel drops a lock when
// the process holding it dies (SIGKILL included), so a killed command never
// leaves a topology held. Another user has another state dir and another
// key: the files are never shared across users.
//
//   - change.lock: exclusive while one command looks at the topology and
//     builds, repairs or reloads it (Ensure), or decides whether to remove
//     it and does (Teardown, GC): two first users do not build it twice, a
//     second removal (`vak session rm` while `vak gc` runs) waits for the
//     first's decision and then makes its own, and nothing is removed while
//     a command looks at it;
//   - lease: shared by every user of the topology (taken under change.lock,
//     kept after it), exclusive by a removal, which only tries: a held
//     topology is in use. A topology that must be rebuilt (a nested Docker
//     session needs nested mode, the running one is plain) is rebuilt only
//     once the lease is free: Ensure waits for that, up to RebuildWait,
//     holding change.lock, so that no new user comes meanwhile.
//
// Lock order: change.lock, then lease.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Lock files of a topology (in leaseDir).
const (
	leaseFile  = "lease"
	changeLock = "change.lock"
)

// lockPoll is how often a wait for a held lock looks again.
const lockPoll = 25 * time.Millisecond

// RebuildWait bounds how long Ensure waits for the other users of a
// topology it must rebuild to let go of it (after that: ErrInUse).
const RebuildWait = time.Minute

// leaseDir is the directory of key's lock files (and its other host state:
// trust files, warm record, gateway env cache).
func leaseDir(stateDir, key string) string {
	return filepath.Join(stateDir, "proxynet", key)
}

// lockFile opens name in key's lease directory and flocks it with how
// (unix.LOCK_SH or unix.LOCK_EX). With wait it waits for the lock until ctx
// ends; without, it returns (nil, nil) when the lock is held.
func lockFile(ctx context.Context, stateDir, key, name string, how int, wait bool) (*os.File, error) {
	dir := leaseDir(stateDir, key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("proxynet: lease of %s: %w", key, err)
	}
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("proxynet: lease of %s: %w", key, err)
	}
	var tick *time.Ticker
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return f, nil
		case err == unix.EINTR:
			continue
		case err != unix.EWOULDBLOCK:
			f.Close()
			return nil, fmt.Errorf("proxynet: lock %s: %w", p, err)
		case !wait:
			f.Close()
			return nil, nil
		}
		if tick == nil {
			tick = time.NewTicker(lockPoll)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("proxynet: wait for %s: %w", p, ctx.Err())
		case <-tick.C:
		}
	}
}

// lockChange takes key's change lock; without wait it returns (nil, nil)
// when another command holds it.
func lockChange(ctx context.Context, stateDir, key string, wait bool) (*os.File, error) {
	return lockFile(ctx, stateDir, key, changeLock, unix.LOCK_EX, wait)
}

// Lease is a command's hold on a workspace's topology: no removal
// (Teardown, GC) takes the topology while it is held.
type Lease struct {
	stateDir, key string
	f             *os.File
}

// holdLease takes key's lease shared (the caller holds the change lock, so
// no removal holds it: it is granted at once).
func holdLease(ctx context.Context, stateDir, key string) (*Lease, error) {
	f, err := lockFile(ctx, stateDir, key, leaseFile, unix.LOCK_SH, true)
	if err != nil {
		return nil, err
	}
	return &Lease{stateDir: stateDir, key: key, f: f}, nil
}

// Release lets go of the topology (a removal may take it from now on). It
// may be called more than once, and on a nil Lease.
func (l *Lease) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// exclusive turns the caller's shared hold into an exclusive one: it waits
// until every other holder has let go, at most RebuildWait. The caller
// holds the change lock, so no new holder comes meanwhile. On failure the
// caller holds nothing.
func (l *Lease) exclusive(ctx context.Context) error {
	l.Release()
	ctx, cancel := context.WithTimeout(ctx, RebuildWait)
	defer cancel()
	f, err := lockFile(ctx, l.stateDir, l.key, leaseFile, unix.LOCK_EX, true)
	l.f = f
	return err
}

// shared turns the caller's exclusive hold back into a shared one (the
// caller holds the change lock: no removal can take the lease between).
func (l *Lease) shared(ctx context.Context) error {
	l.Release()
	f, err := lockFile(ctx, l.stateDir, l.key, leaseFile, unix.LOCK_SH, true)
	l.f = f
	return err
}

// removal is a removal's hold on a topology: its change lock and its
// lease, both exclusive.
type removal struct{ change, lease *os.File }

// startRemoval takes key's change lock (waiting for it with wait; without,
// a held one means the topology is being looked at: nil), then tries its
// lease: it returns nil, and no error, when a command holds the lease (the
// topology is in use: its holder, or a later removal, decides).
func startRemoval(ctx context.Context, stateDir, key string, wait bool) (*removal, error) {
	ch, err := lockChange(ctx, stateDir, key, wait)
	if err != nil || ch == nil {
		return nil, err
	}
	l, err := lockFile(ctx, stateDir, key, leaseFile, unix.LOCK_EX, false)
	if err != nil || l == nil {
		ch.Close()
		return nil, err
	}
	return &removal{change: ch, lease: l}, nil
}

// done ends the removal: commands waiting for the topology go on.
func (r *removal) done() {
	r.lease.Close()
	r.change.Close()
}
