package cli

import (
	"vak/internal/hints"
	"vak/internal/paths"
)

// outputTail keeps a command's output tail for failureHint (hints.Tail).
type outputTail struct{ hints.Tail }

// tee records the output into t and passes it on to next (hints.Tail.Tee).
func (t *outputTail) tee(next func(stream string, data []byte)) func(string, []byte) {
	return t.Tee(next)
}

// failureHint is the hint line after a failed command, "" for none
// (hints.Failure); inSession says it ran in a session.
func (a *app) failureHint(tail *outputTail, exitCode int, inSession bool) string {
	return hints.Failure(&tail.Tail, exitCode, inSession, a.userConfigFile())
}

// userConfigFile is the trusted user config this invocation reads (for
// messages): --config, else the default path.
func (a *app) userConfigFile() string {
	if a.userConfig != "" {
		return a.userConfig
	}
	if f, err := paths.UserConfigFile(); err == nil {
		return f
	}
	return "the user config"
}
