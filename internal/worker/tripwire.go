package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"strings"

	"vak/internal/fsguard"
	"vak/internal/keeper"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// The tripwire runs around every command, on the worker's side (on the host
// for the docker backend, inside the view for landlock). Before the command
// it records what each protected path and each .git entry of the workspace
// is; after it, it removes what the command planted and clears setuid and
// setgid bits. Every operation resolves paths beneath the workspace without
// following a symbolic link (fsguard.Tree): a link the command made is
// removed as the link itself and never leads the worker outside.

// tripState is what the protected paths and .git entries were before a command.
type tripState struct {
	git  map[string]fsguard.Entry
	prot map[string]fsguard.Entry
	err  error
}

// tripBefore records the state before a command.
func (x *Exec) tripBefore() tripState {
	if x.NoTripwire {
		return tripState{}
	}
	if runtime.GOOS != "linux" {
		return x.tripBeforeLegacy()
	}
	return snapshot(x.Workspace, x.Protected, x.scanner())
}

// scanner is what the tripwire's passes look at the workspace with: a
// Watch, a Ledger, or (a nil *fsguard.Watch) a walk each time.
type scanner interface {
	Scan(t *fsguard.Tree, setuid bool) (fsguard.Scan, error)
}

// scanner is the Exec's: its Ledger (a TripwireState's sweep), else its
// Watch once it is in use.
func (x *Exec) scanner() scanner {
	if x.ledger != nil {
		return x.ledger
	}
	return x.watch()
}

// watch is the Watch to use for a pass: none before the first command's
// tripwire finished (see Exec.Watch).
func (x *Exec) watch() *fsguard.Watch {
	if x.watching.Load() {
		return x.Watch
	}
	return nil
}

// TripwireState is what a workspace's .git entries and protected paths
// were at one moment (Snapshot), for a later Sweep.
type TripwireState struct {
	st tripState
	// ws and w are the workspace and the Watch that has kept it current
	// since the state was recorded (WatchedSnapshot), or "" and nil; l
	// is the keeper or Ledger the state was recorded with
	// (LedgerSnapshot).
	ws string
	w  *fsguard.Watch
	l  *keptLedger
}

// Snapshot records the state of workspace ws for protected (the
// configured, workspace-relative entries). It returns nil where fsguard.Tree
// is unsupported (not Linux); Sweep of nil does nothing.
func Snapshot(ws string, protected []string) *TripwireState {
	if runtime.GOOS != "linux" {
		return nil
	}
	return &TripwireState{st: snapshot(ws, protected, (*fsguard.Watch)(nil))}
}

// WatchedSnapshot is Snapshot recorded through an fsguard.Watch that the
// state keeps: its walk puts a watch on every directory, and a later Sweep
// looks only at what the kernel reported changed since, with a full walk
// only where the Watch cannot keep current. A workspace's last sweep, after
// a command that ran for hours, then costs what the command changed, not
// what the workspace holds; the walk is paid up front, while the sandbox
// starts. A Watcher of the same workspace against the state uses its Watch
// too. Close releases the Watch.
//
// noSetIDModes says no writer of the workspace can give a file the setuid
// or setgid bit through a mode change (sandbox.WorkerLaunch.NoSetIDModes):
// the walk then stats no file (fsguard.NewChangeWatch), and a Sweep clears
// the bits of files that gained them since, not of files that had them
// before (which no sandboxed process made). Otherwise it stats every
// file, as a Sweep's own walk would.
func WatchedSnapshot(ws string, protected []string, noSetIDModes bool) *TripwireState {
	if runtime.GOOS != "linux" {
		return nil
	}
	w := fsguard.NewWatch(ws)
	if noSetIDModes {
		w = fsguard.NewChangeWatch(ws)
	}
	st := snapshot(ws, protected, w)
	if st.err != nil {
		w.Close()
		return &TripwireState{st: st}
	}
	return &TripwireState{st: st, ws: ws, w: w}
}

// LedgerSnapshot is WatchedSnapshot for a workspace that is swept once,
// by a process that will not be there for the next command (a cold `vak
// run`): instead of a walk and a watch on every directory, it asks the
// workspace's keeper on socket keep (package keeper; "" for none), and
// where none answers checks the fsguard.Ledger kept in file (a stat per
// directory, a read of those that changed since the last run). Its Sweep
// asks the same again (the Ledger where the keeper is gone by then), and
// Close saves the Ledger, if it was used, for the next run. Like
// NewChangeWatch it is for a workspace whose writers cannot give a file
// the setuid or setgid bit by a mode change (noSetIDModes): its Sweep
// clears the bits of files that are new since the state was recorded.
func LedgerSnapshot(ws string, protected []string, file, keep string) *TripwireState {
	if runtime.GOOS != "linux" {
		return nil
	}
	k := &keptLedger{ws: ws, file: file, sock: keep}
	st := snapshot(ws, protected, k)
	if st.err != nil {
		return &TripwireState{st: st}
	}
	return &TripwireState{st: st, ws: ws, l: k}
}

// LedgerStats is what the Ledger of a LedgerSnapshot did in its last pass
// (ok false for other states, and for one a keeper answered: Keeper).
func (s *TripwireState) LedgerStats() (st fsguard.LedgerStats, ok bool) {
	if s == nil || s.l == nil || s.l.led == nil {
		return st, false
	}
	return s.l.led.Stats(), true
}

// Keeper is the pid of the workspace keeper that answered a LedgerSnapshot's
// passes (ok false if none did, or the Ledger took over from it).
func (s *TripwireState) Keeper() (pid int, ok bool) {
	if s == nil || s.l == nil {
		return 0, false
	}
	return s.l.pid, s.l.pid > 0 && s.l.led == nil
}

// WantsKeeper says the state's Ledger found a workspace large enough
// (keeper.MinDirs directories) for a keeper to save the next run its
// passes, and could keep it (it did not give up).
func (s *TripwireState) WantsKeeper() bool {
	if s == nil || s.l == nil || s.l.led == nil || s.l.sock == "" {
		return false
	}
	st := s.l.led.Stats()
	return st.Off == "" && st.Dirs >= keeper.MinDirs
}

// keptLedger is a LedgerSnapshot's scanner: the keeper on sock while it
// answers, else the Ledger in file, opened on first use. Once a pass used
// the Ledger, every later one does (the Ledger's Setuid is what is new
// since its own last pass).
type keptLedger struct {
	ws, file, sock string
	led            *fsguard.Ledger
	pid            int // the keeper that answered
}

func (k *keptLedger) Scan(t *fsguard.Tree, setuid bool) (fsguard.Scan, error) {
	if k.led == nil && k.sock != "" {
		r, err := keeper.Scan(k.sock, t, setuid)
		if err == nil {
			k.pid = r.PID
			return r.Scan, nil
		}
	}
	if k.led == nil {
		k.led = fsguard.OpenLedger(k.ws, k.file)
	}
	return k.led.Scan(t, setuid)
}

// Protection is the protected-path plan of the workspace ws as the state
// recorded it (fsguard.ProtectionOf) for configured, the list the state was
// recorded for: one walk then serves the sandbox's mounts and the sweep's
// baseline. A state that could not be recorded has no plan (Err).
func (s *TripwireState) Protection(ws string, configured []string) (sandbox.Protection, error) {
	if err := s.Err(); err != nil {
		return sandbox.Protection{}, fmt.Errorf("protected paths of %s: %w", ws, err)
	}
	return fsguard.ProtectionOf(ws, configured, s.st.git, s.st.prot), nil
}

// Close releases the Watch of a WatchedSnapshot (later Sweeps walk) and
// saves the Ledger of a LedgerSnapshot. It does nothing for other states,
// nil included.
func (s *TripwireState) Close() error {
	switch {
	case s == nil:
		return nil
	case s.l != nil:
		if s.l.led == nil {
			return nil
		}
		return s.l.led.Save()
	case s.w != nil:
		return s.w.Close()
	}
	return nil
}

// watchOf is the state's Watch if it keeps workspace ws current, else nil.
func (s *TripwireState) watchOf(ws string) *fsguard.Watch {
	if s == nil || s.ws != ws {
		return nil
	}
	return s.w
}

// Err is why the state could not be recorded (the workspace could not be
// walked), or nil.
func (s *TripwireState) Err() error {
	if s == nil {
		return nil
	}
	return s.st.err
}

// tripStateJSON is a TripwireState on disk (a session's baseline, which a
// restarted watcher and the end of the session sweep against).
type tripStateJSON struct {
	Git       map[string]fsguard.Entry `json:"git"`
	Protected map[string]fsguard.Entry `json:"protected"`
}

// MarshalJSON encodes the state; a state that could not be recorded
// (Err) is an error, never an empty baseline.
func (s *TripwireState) MarshalJSON() ([]byte, error) {
	if s.st.err != nil {
		return nil, fmt.Errorf("tripwire state: %w", s.st.err)
	}
	return json.Marshal(tripStateJSON{Git: s.st.git, Protected: s.st.prot})
}

// UnmarshalJSON decodes a state MarshalJSON encoded.
func (s *TripwireState) UnmarshalJSON(b []byte) error {
	var j tripStateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("tripwire state: %w", err)
	}
	if j.Git == nil || j.Protected == nil {
		return errors.New("tripwire state: no git or protected section")
	}
	s.st = tripState{git: j.Git, prot: j.Protected}
	return nil
}

// Sweep removes what was planted in ws since the snapshot and clears
// setuid bits, exactly as the tripwire after a command does, and reports
// it in res (ProtectedRemoved, SetuidCleared, TripwireWarnings). The broker
// sweeps once more when a session ends, after every sandboxed process is
// gone: a background job can plant after a command's own check. denied
// says something could not be removed or cleared for lack of permission
// (an entry another user made, such as root in an inner container of a
// --docker session): a sweep with more privilege must finish the job.
func (s *TripwireState) Sweep(ws string, protected []string, res *wire.BashResult) (denied bool, err error) {
	if s == nil {
		return false, nil
	}
	x := &Exec{Workspace: ws, Protected: protected, Watch: s.watchOf(ws)}
	if s.ws == ws {
		x.ledger = s.l
	}
	x.watching.Store(x.Watch != nil)
	return x.tripCheck(s.st, res)
}

// snapshot records the state of ws, scanned with w (a nil *fsguard.Watch
// walks).
func snapshot(ws string, protected []string, w scanner) tripState {
	t, err := fsguard.OpenTree(ws)
	if err != nil {
		return tripState{err: err}
	}
	defer t.Close()
	sc, err := w.Scan(t, false)
	if err != nil {
		return tripState{err: err}
	}
	st := tripState{git: sc.Git, prot: map[string]fsguard.Entry{}}
	ps := protStats{scan: &sc}
	for _, rel := range fsguard.ExpandProtected(protected, sc.GitRoots()) {
		e, err := ps.stat(t, rel)
		if err != nil {
			return tripState{err: err}
		}
		st.prot[rel] = e
	}
	return st
}

// protStats stats protected paths in one pass of the tripwire. A path
// whose first component the pass's Scan did not find in the workspace
// directory (fsguard.Scan.Lacks, which compares names as a case-folding
// file system would) is absent without a system call: most protected
// entries do not exist in most workspaces (.vscode, .envrc, .mise.toml,
// ...; .git and the entries below it in a workspace that is no
// repository). Of the others, it remembers which first components it found
// absent: a path below an absent one is absent too. The answer is the one
// Tree.Stat gives, which is absent from the first missing component on.
//
// An entry created between the Scan's read of the workspace directory and
// the stat is absent here, where Tree.Stat would have found it: the answer
// is the directory as the Scan read it. Before a command, such an entry
// then counts as planted and is removed after it, as anything the command
// or its background jobs create; after a command, it is treated exactly as
// an entry planted a moment after this check (only a background job or the
// user can make either): the broker's sweep at the end of the session,
// against the state at its start, removes it.
type protStats struct {
	scan  *fsguard.Scan   // the pass's walk
	first map[string]bool // first component: absent
}

func (p *protStats) stat(t *fsguard.Tree, rel string) (fsguard.Entry, error) {
	first, _, deeper := strings.Cut(path.Clean(rel), "/")
	if p.scan != nil && p.scan.Lacks(first) {
		return fsguard.Entry{Kind: fsguard.Absent}, nil
	}
	if deeper {
		absent, known := p.first[first]
		if !known {
			e, err := t.Stat(first)
			if err != nil {
				return e, err
			}
			absent = e.Kind == fsguard.Absent
			if p.first == nil {
				p.first = map[string]bool{}
			}
			p.first[first] = absent
		}
		if absent {
			return fsguard.Entry{Kind: fsguard.Absent}, nil
		}
	}
	return t.Stat(rel)
}

// tripAfter removes what the command planted and reports it:
//
//   - a .git entry (directory, gitdir file or link, at any depth) that did
//     not exist before or is not the same object as before (renamed over,
//     replaced) is removed: host git would take its config and hooks;
//   - a protected path (expanded to every nested repository) that did not
//     exist before and exists now is removed; one that is now reached
//     through a new symbolic link loses that link;
//   - setuid and setgid bits of regular files are cleared.
func (x *Exec) tripAfter(before tripState, res *wire.BashResult) error {
	if x.NoTripwire {
		return nil
	}
	if runtime.GOOS != "linux" {
		res.ProtectedRemoved = x.tripAfterLegacy(before)
		return nil
	}
	_, err := x.tripCheck(before, res)
	return err
}

// tripCheck is tripAfter on Linux; denied says an entry could not be
// removed or a mode cleared for lack of permission (see
// TripwireState.Sweep).
func (x *Exec) tripCheck(before tripState, res *wire.BashResult) (denied bool, _ error) {
	if before.err != nil {
		return false, fmt.Errorf("tripwire: %w", before.err)
	}
	t, err := fsguard.OpenTree(x.Workspace)
	if err != nil {
		return false, fmt.Errorf("tripwire: %w", err)
	}
	defer t.Close()
	sc, err := x.scanner().Scan(t, true)
	if x.Watch != nil {
		x.watching.Store(true)
	}
	if err != nil {
		return false, fmt.Errorf("tripwire: %w", err)
	}
	var errs []error
	remove := func(rel, report string) {
		if err := t.Remove(rel); err != nil {
			errs = append(errs, err)
			return
		}
		res.ProtectedRemoved = append(res.ProtectedRemoved, report)
	}
	for _, rel := range sc.GitNames() {
		e := sc.Git[rel]
		if b, ok := before.git[rel]; ok && b.Same(e) {
			continue
		}
		remove(rel, rel)
	}
	ps := protStats{scan: &sc}
	roots := append((fsguard.Scan{Git: before.git}).GitRoots(), sc.GitRoots()...)
	for _, rel := range fsguard.ExpandProtected(x.Protected, roots) {
		e, err := ps.stat(t, rel)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b, known := before.prot[rel]
		if e.Kind == fsguard.Absent || (known && b.Same(e)) {
			continue
		}
		switch {
		case e.Kind == fsguard.ViaLink:
			// Reached through a link the command made: the link goes.
			remove(e.Via, rel+" (through the link "+e.Via+")")
		case !known || b.Kind == fsguard.Absent || e.Kind == fsguard.Link:
			remove(rel, rel)
		default:
			// The same kind of object, replaced: it is read-only in the
			// sandbox (a mount the command cannot rename over), so the
			// change came from outside (the user's editor or git).
		}
	}
	for _, rel := range sc.Setuid {
		mode, err := t.ClearSetuid(rel)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.SetuidCleared = append(res.SetuidCleared, fmt.Sprintf("%s (mode was %04o)", rel, mode))
	}
	if sc.Truncated {
		res.TripwireWarnings = append(res.TripwireWarnings, fmt.Sprintf("the workspace has more than %d entries or %d levels: the tripwire checked only the first ones", fsguard.MaxWalkEntries, fsguard.MaxWalkDepth))
	}
	for _, err := range errs {
		denied = denied || errors.Is(err, fs.ErrPermission)
		res.TripwireWarnings = append(res.TripwireWarnings, err.Error())
	}
	return denied, nil
}
