package main

import (
	"fmt"
	"strings"
	"time"

	"vak/bench/internal/stats"
	"vak/internal/broker"
)

// startFloors is the cold table's comparison with bubblewrap (issue 32
// item 2: a cold `vak run` at most 2× bubblewrap with the same kind of
// view) and the floors of a design that would meet it: a run that does
// not build its sandbox but takes one started before it, as a per-user
// process holding ready sandboxes would hand it out. The sandbox is a
// landlock worker started before timing; each floor sample starts a
// front process and then asks that worker for one `true`. Behind vak's
// own front the process is `vak version` (vak's start, its package
// initialisation, without its config or flags); behind a lean front, the
// lean stage program's start. Both are less than such a run would cost
// (no socket to the per-user process, no config), so they are floors.
type startFloors struct {
	bwArgv           []string
	bw               *stats.Sample
	ready, readyLean *stats.Sample
	roundTrip        func() error
	sess             *broker.Session
	vak, lean        string
}

func newStartFloors(vak, lean, ws string) *startFloors {
	f := &startFloors{
		vak: vak, lean: lean,
		bwArgv:    stats.Bwrap(ws, "true"),
		bw:        &stats.Sample{Name: "bubblewrap around `true` (the kind of view vak builds; bench/peers' argv)"},
		ready:     floorSample("`vak version`, then `true` on a landlock worker started before timing (a run that takes a ready sandbox, behind vak's front)"),
		readyLean: floorSample("the lean stage program's start, then the same (a ready sandbox behind a lean front)"),
	}
	f.roundTrip, f.sess = warmSession(vak, ws)
	return f
}

func (f *startFloors) close() { f.sess.Close() }

// round times each of them once; keep drops the warm-up rounds.
func (f *startFloors) round(keep func(*stats.Sample, time.Duration)) {
	if f.bwArgv != nil {
		keep(f.bw, stats.MustTime(runTimes(1, f.bwArgv...)))
	}
	keep(f.ready, stats.MustTime(func() error {
		if err := runTimes(1, f.vak, "version")(); err != nil {
			return err
		}
		return f.roundTrip()
	}))
	keep(f.readyLean, stats.MustTime(func() error {
		if err := runUsage(1, f.lean); err != nil {
			return err
		}
		return f.roundTrip()
	}))
}

// rows are the table rows: bubblewrap among the contenders, the floors
// among the floors.
func (f *startFloors) rows() (contenders, floors []*stats.Sample) {
	if f.bwArgv != nil {
		contenders = append(contenders, f.bw)
	}
	return contenders, []*stats.Sample{f.ready, f.readyLean}
}

// summary says where run (`vak run` in a fresh workspace) and this
// design's process starts (starts, a floor) stand against bubblewrap.
func (f *startFloors) summary(run, starts *stats.Sample) string {
	if f.bwArgv == nil {
		return "No bubblewrap here (bwrap is not installed: bench/peers/install.sh): no ratios for issue 32 item 2.\n\n"
	}
	iv := stats.MustInterval(f.bw, run)
	var b strings.Builder
	fmt.Fprintf(&b, "Against bubblewrap (issue 32 item 2, target ≤ 2×), each the ratio of medians and its 95 %% interval:\n\n")
	fmt.Fprintf(&b, "- `vak run` in a fresh workspace: %v, **%s**;\n", iv, iv.Versus(2))
	fmt.Fprintf(&b, "- floor, this design's process starts (%s): %v;\n", strings.TrimPrefix(starts.Name, "floor: "), stats.MustInterval(f.bw, starts))
	fmt.Fprintf(&b, "- floor, a ready sandbox behind vak's front: %v;\n", stats.MustInterval(f.bw, f.ready))
	fmt.Fprintf(&b, "- floor, a ready sandbox behind a lean front: %v.\n\n", stats.MustInterval(f.bw, f.readyLean))
	return b.String()
}
