package cli

import (
	"fmt"
	"regexp"
	"sync"

	"vak/internal/paths"
)

// outputTailBytes is how much of the end of each of a command's output
// streams a hint looks at (the errors that call for one are printed last).
const outputTailBytes = 4 << 10

// outputTail keeps the last outputTailBytes of a command's stdout and of
// its stderr, for the hint after a failure (failureHint). Safe for
// concurrent use.
type outputTail struct {
	mu      sync.Mutex
	streams map[string][]byte
}

// tee returns an output callback that records into t and passes on to
// next.
func (t *outputTail) tee(next func(stream string, data []byte)) func(string, []byte) {
	return func(stream string, data []byte) {
		t.mu.Lock()
		if t.streams == nil {
			t.streams = map[string][]byte{}
		}
		b := append(t.streams[stream], data...)
		if len(b) > outputTailBytes {
			b = append([]byte(nil), b[len(b)-outputTailBytes:]...)
		}
		t.streams[stream] = b
		t.mu.Unlock()
		next(stream, data)
	}
}

// matches reports whether either stream's tail matches re.
func (t *outputTail) matches(re *regexp.Regexp) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.streams {
		if re.Match(b) {
			return true
		}
	}
	return false
}

// installFailure matches what package managers print when they lack root,
// or the capabilities every vak sandbox drops even for root: apt's
// privilege drop to its _apt user (setgroups/setegid/seteuid "Operation
// not permitted"), apt's and dpkg's locks without root, apk's database
// lock, dnf's and yum's superuser check.
var installFailure = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)` +
		`^E: (?:setgroups|setegid|seteuid|setgid|setuid) -?\d+ failed - \w+ \(1: Operation not permitted\)` +
		`|^E: Could not open lock file /var/(?:lib|cache)/(?:apt|dpkg)/\S+ - open \(13: Permission denied\)` +
		`|^ERROR: Unable to lock database: (?:Permission denied|Operation not permitted)` +
		`|^Error: This command has to be run with superuser privileges`)
})

// failureHint returns the one line vak prints after a command that failed
// (exit status exitCode) in a way it can explain, "" otherwise: a package
// install that needs root and capabilities is what [session]
// allow_install and `vak session exec --root` are for. inSession says the
// command ran in a session (vak session exec) rather than vak run.
func (a *app) failureHint(tail *outputTail, exitCode int, inSession bool) string {
	if exitCode == 0 || !tail.matches(installFailure()) {
		return ""
	}
	what := "vak run drops"
	if inSession {
		what = "this command did not have"
	}
	return fmt.Sprintf("vak: hint: installing packages needs root with capabilities that %s; [session] allow_install = true in %s gives them to sessions created after it: vak session exec --root ID -- CMD (docs/sessions.md)\n", what, a.userConfigFile())
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
