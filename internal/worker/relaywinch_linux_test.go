package worker

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/worker/wire"
)

// TestRelayTerminalWinchAgain: a command on a RawTerminal terminal (a
// relay such as `docker exec -it`) that asks for SIGWINCH only after a
// resize still learns of it: the worker signals the terminal's foreground
// group again (relayWinchAgain). The command here is blocked in a read,
// with SIGWINCH at its default (ignored), when the resize comes; it arms
// its trap only after the line typed right after the resize. Without the
// second signal it never prints the size; on a terminal of the other
// kind (the control) it does not either.
func TestRelayTerminalWinchAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  bool
	}{{"relay", true}, {"control", false}} {
		raw := tc.raw
		t.Run(tc.name, func(t *testing.T) {
			x := &Exec{Workspace: t.TempDir(), Env: os.Environ(), NoTripwire: true, RawTerminal: raw}
			in := NewInteraction(wire.TTYSize{Rows: 10, Cols: 20})
			var out collect
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			script := `echo started; read x; trap 'stty size; exit 0' WINCH; echo armed; while :; do sleep 0.05; done`
			go func() {
				_, err := x.BashInteractive(ctx, wire.BashArgs{Command: script, TTY: &wire.TTYSize{Rows: 10, Cols: 20}}, in, out.emit)
				done <- err
			}()
			waitUntil(t, "the command to start", func() bool { return strings.Contains(out.get("stdout"), "started") })
			in.Resize(wire.TTYSize{Rows: 41, Cols: 101})
			if err := in.Input([]byte("go\n"), false); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the trap", func() bool { return strings.Contains(out.get("stdout"), "armed") })
			if !raw {
				// Nothing can be waited for here: twice the last delay,
				// by which the relay subtest's signal has come.
				time.Sleep(2 * relayWinchAgain[len(relayWinchAgain)-1])
				if s := out.get("stdout"); strings.Contains(s, "41 101") {
					t.Fatalf("a terminal without RawTerminal got SIGWINCH again: %q", s)
				}
				cancel()
				<-done
				return
			}
			waitUntil(t, "the size, after SIGWINCH again", func() bool { return strings.Contains(out.get("stdout"), "41 101") })
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWinchAgainAfterTheLastResize: the start's size and a size not set
// are no resize; a burst of resizes gets one signal again per delay,
// counted from its last resize.
func TestWinchAgainAfterTheLastResize(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	w := &winchAgain{send: func() {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
	}}
	sent := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(at)
	}
	w.sized(true)  // the start's size
	w.sized(false) // nothing set
	// Both would have been sent by now if either had counted.
	time.Sleep(2 * relayWinchAgain[len(relayWinchAgain)-1])
	if n := sent(); n != 0 {
		t.Fatalf("%d signals again for the start's size and a zero size, want 0", n)
	}
	var last time.Time
	for range 5 {
		w.sized(true)
		last = time.Now()
	}
	waitUntil(t, "the signals again", func() bool { return sent() >= len(relayWinchAgain) })
	time.Sleep(2 * relayWinchAgain[len(relayWinchAgain)-1])
	mu.Lock()
	defer mu.Unlock()
	if len(at) != len(relayWinchAgain) {
		t.Fatalf("%d signals again after a burst of 5 resizes, want %d", len(at), len(relayWinchAgain))
	}
	for i, d := range relayWinchAgain {
		if got := at[i].Sub(last); got < d {
			t.Errorf("signal %d came %v after the last resize, want at least %v", i, got, d)
		}
	}
}
