package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"vak/internal/fsguard"
	"vak/internal/keeper"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/trace"
	"vak/internal/worker"
)

// workspaceWalk is the walk of the workspace a process backend's worker
// start needs, made while the worker process starts up (the worker reads
// its spec only when its own start-up is done, and nothing in the sandbox
// touches the workspace before its first request, which comes after Start
// has waited for the walk): the protected-path plan the sandbox mounts,
// made here alone without following links (existing protected paths
// read-only, .git and the parents of protected paths pinned, nested
// repositories included), and, where the backend sweeps the workspace at
// close, the baseline of that sweep, from the same walk
// (worker.WatchedSnapshot, whose watch keeps it current: the sweep and
// the watcher of a long-lived session then look only at what changed). A
// session of one command whose backend allows no setuid mode change (a
// cold `vak run`) takes both from the workspace's ledger instead
// (worker.LedgerSnapshot): a stat per directory, and a read of those that
// changed since the last run, where a walk would read every one. One that
// needs no baseline (a read-only `vak run`) takes its plan from the ledger
// too.
type workspaceWalk struct {
	done     chan struct{}
	prot     sandbox.Protection
	err      error
	baseline *worker.TripwireState
	// ledger is the state the plan alone came from (no baseline), for
	// the trace.
	ledger *worker.TripwireState
	// watcher holds the workspace against the baseline for a long-lived
	// session (its first pass walks no more: it shares the baseline's
	// watch); watchErr says why there is none where one was asked for.
	watcher    *worker.Watcher
	watchErr   error
	start, end time.Time
}

// startWalk starts the walk of workspace ws for the configured protected
// paths: for the plan where plan is set (the backend's spec takes one),
// for the sweep's baseline too where baseline is set (noSetIDModes as for
// worker.WatchedSnapshot), and the watcher of a long-lived session against
// it where watch is set. ledger says the session runs one command: the
// baseline comes from the workspace's ledger where noSetIDModes is set
// too, and a plan without a baseline always does (see workspaceWalk).
// With neither plan nor baseline it walks nothing.
func startWalk(ws string, protected []string, plan, baseline, watch, noSetIDModes, ledger bool) *workspaceWalk {
	wk := &workspaceWalk{done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(wk.done)
		defer func() { wk.end = time.Now() }()
		if baseline {
			if ledger && noSetIDModes {
				wk.baseline = worker.LedgerSnapshot(ws, protected, ledgerFile(ws), keeper.SocketOf(ws))
			} else {
				wk.baseline = worker.WatchedSnapshot(ws, protected, noSetIDModes)
			}
			if watch {
				wk.watcher, wk.watchErr = worker.NewWatcher(ws, protected, wk.baseline)
			}
			if wk.baseline != nil && wk.baseline.Err() == nil {
				wk.prot, wk.err = wk.baseline.Protection(ws, protected)
				return
			}
			// No baseline here (not Linux), or none could be recorded
			// (the sweep says so): the plan walks for itself, as it
			// would without a baseline.
		}
		if plan && ledger && !baseline {
			// Nothing the command does is swept: the record is saved
			// as this pass left it.
			wk.ledger = worker.LedgerSnapshot(ws, protected, ledgerFile(ws), keeper.SocketOf(ws))
			if wk.ledger != nil && wk.ledger.Err() == nil {
				wk.prot, wk.err = wk.ledger.Protection(ws, protected)
				wk.ledger.Close()
				return
			}
		}
		if plan {
			wk.prot, wk.err = fsguard.PlanProtection(ws, protected)
		}
	}()
	return wk
}

// ledgerFile is where the ledger of workspace ws is kept: in vak's state
// directory, which no sandbox sees, named by a hash of the path. "" (no
// state directory) keeps it for the process only.
func ledgerFile(ws string) string {
	d, err := paths.StateDir()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(ws))
	return filepath.Join(d, "ledgers", hex.EncodeToString(sum[:16]))
}

// wait waits for the walk to end and records it in tr.
func (wk *workspaceWalk) wait(tr *trace.Trace) {
	<-wk.done
	state, what := wk.baseline, "mount plan and baseline"
	if wk.ledger != nil {
		state, what = wk.ledger, "mount plan"
	}
	name := "  workspace walk (" + what + ", while the worker starts)"
	if pid, ok := state.Keeper(); ok {
		name = fmt.Sprintf("  workspace keeper (%s, while the worker starts): answered by pid %d", what, pid)
	} else if st, ok := state.LedgerStats(); ok {
		name = fmt.Sprintf("  workspace ledger (%s, while the worker starts): %s", what, describeLedger(st))
	}
	tr.Add(name, wk.start, wk.end)
}

// describeLedger says what a ledger's last pass did, for the trace.
func describeLedger(st fsguard.LedgerStats) string {
	switch {
	case st.Off != "":
		return "walked (" + st.Off + ")"
	case !st.Loaded && st.Read == st.Dirs:
		return fmt.Sprintf("walked %d directories (no record: %s)", st.Dirs, st.Why)
	}
	return fmt.Sprintf("read %d of %d directories, the rest unchanged", st.Read, st.Dirs)
}

// spec is the backend's part of the worker spec for the walk's plan
// (sandbox.WorkerLaunch.Spec), once the walk has ended.
func (wk *workspaceWalk) spec(l *sandbox.WorkerLaunch) (json.RawMessage, error) {
	<-wk.done
	if wk.err != nil {
		return nil, wk.err
	}
	if l.Spec == nil {
		return nil, nil
	}
	return l.Spec(wk.prot)
}
