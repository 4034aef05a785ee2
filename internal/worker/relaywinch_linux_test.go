package worker

import (
	"context"
	"os"
	"strings"
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
	for _, raw := range []bool{true, false} {
		t.Run(map[bool]string{true: "relay", false: "control"}[raw], func(t *testing.T) {
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
