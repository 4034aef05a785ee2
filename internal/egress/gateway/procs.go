package gateway

import (
	"fmt"
	"os"
	"runtime"
)

// DefaultProcs is the GOMAXPROCS a `vak gateway` process runs with unless
// told otherwise (--procs, or the GOMAXPROCS environment variable). One:
// with more, every request hands work between threads (the response from
// upstream, net/http's per-request background read, timers), and each
// hand-off wakes an idle thread, which on a small machine (a VM) costs
// more than the work: measured in bench/egress on 2 cores, one P served
// 1.08-1.22x the requests at concurrency 1 and was within noise at 32
// (docs/BENCHMARKS.md). A gateway serving many busy sandboxes on a large
// machine can ask for more with --procs 0 (one per CPU).
const DefaultProcs = 1

// SetProcs sets this process's GOMAXPROCS for the gateway: n > 0 sets it,
// 0 keeps the Go runtime's default (one per CPU, within a container's CPU
// limit). A GOMAXPROCS environment variable, when set, wins. It returns the
// value in effect.
func SetProcs(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("gateway: --procs %d: want 0 (one per CPU) or a positive number", n)
	}
	if n > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(n)
	}
	return runtime.GOMAXPROCS(0), nil
}
