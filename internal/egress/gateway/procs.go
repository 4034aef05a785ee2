package gateway

import (
	"fmt"
	"os"
	"runtime"
)

// DefaultProcs is the GOMAXPROCS a `vak gateway` process runs with unless
// told otherwise (--procs, or the GOMAXPROCS environment variable): 0, the
// Go runtime's default (one per CPU). One thread served requests made one
// at a time 1.07-1.14x faster on 2 cores (fewer thread hand-offs), but 32 in
// flight 20% slower, below issue 16's concurrency-32 target, in a quiet
// interleaved run (docs/BENCHMARKS.md): a latency-bound single agent on a
// small VM can ask for --procs 1.
const DefaultProcs = 0

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
