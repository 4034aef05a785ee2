package worker

import (
	"os"
	"os/signal"
	"syscall"
)

// inheritedIgnores are the signals a Go program leaves ignored when it
// starts with them ignored (nohup ignores SIGHUP; a non-interactive shell
// starts its background jobs with SIGINT ignored), and so passes on,
// ignored, to every process it starts: a command's `trap ... INT` would then
// do nothing, and a forwarded Ctrl-C (the signal request) would not reach
// it. Commands run in sessions of their own, away from the terminal that
// job control protects them from, so they start with the defaults, as in a
// container.
var inheritedIgnores = []os.Signal{syscall.SIGHUP, syscall.SIGINT}

// UnignoreSignals makes the commands this process starts get the default
// disposition of the signals it inherited ignored. The process itself still
// disregards them: they are delivered to a channel nobody reads (os/exec's
// children get SIG_DFL for every signal the Go runtime handles).
func UnignoreSignals() {
	var sigs []os.Signal
	for _, s := range inheritedIgnores {
		if signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) > 0 {
		signal.Notify(make(chan os.Signal, 1), sigs...)
	}
}
