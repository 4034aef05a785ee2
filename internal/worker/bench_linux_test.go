package worker

import (
	"context"
	"os"
	"testing"
	"time"

	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// BenchmarkRoundTrip is a warm worker's round trip without a sandbox: a
// client and Run on real pipes, in this process (allocs/op counts both
// sides), a bash request for `true` with the default protected paths (the
// tripwire runs). The landlock backend's own round trip is measured by
// bench/landlock.
//
//	go test -run '^$' -bench RoundTrip -benchmem ./internal/worker/
func BenchmarkRoundTrip(b *testing.B) {
	ws, err := paths.CanonicalWorkspace(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	spec := &Spec{Backend: "none", Workspace: ws, Mode: sandbox.WorkspaceWrite, Env: []string{"PATH=" + os.Getenv("PATH")}, Protected: sandbox.DefaultProtected}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), spec, sandbox.WorkerOutcome{Description: "bench"}, inR, outW)
		outW.Close()
	}()
	c := wire.NewClient(inW, outR)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	bg := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := c.Bash(bg, wire.BashArgs{Command: "true"}, nil)
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("bash: %v %+v", err, r)
		}
	}
	b.StopTimer()
	inW.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	inR.Close()
	outR.Close()
}
