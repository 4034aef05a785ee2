// Package hints explains failures vak can recognize in a command's output:
// the one line printed after a command that failed for a reason vak knows
// a way around (a package install without root or capabilities).
package hints

import (
	"fmt"
	"regexp"
	"sync"
)

// TailBytes is how much of the end of each of a command's output streams
// a hint looks at (the errors that call for one are printed last).
const TailBytes = 4 << 10

// Tail keeps the last TailBytes of a command's stdout and of its stderr,
// for the hint after a failure (Failure). Safe for concurrent use.
type Tail struct {
	mu      sync.Mutex
	streams map[string][]byte
}

// Tee returns an output callback that records into t and passes on to
// next.
func (t *Tail) Tee(next func(stream string, data []byte)) func(string, []byte) {
	return func(stream string, data []byte) {
		t.mu.Lock()
		if t.streams == nil {
			t.streams = map[string][]byte{}
		}
		b := append(t.streams[stream], data...)
		if len(b) > TailBytes {
			b = append([]byte(nil), b[len(b)-TailBytes:]...)
		}
		t.streams[stream] = b
		t.mu.Unlock()
		next(stream, data)
	}
}

// matches reports whether either stream's tail matches re.
func (t *Tail) matches(re *regexp.Regexp) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.streams {
		if re.Match(b) {
			return true
		}
	}
	return false
}

// InstallFailure matches what package managers print when they lack root,
// or the capabilities every vak sandbox drops even for root: apt's
// privilege drop to its _apt user (setgroups/setegid/seteuid "Operation
// not permitted"), apt's and dpkg's locks without root, apk's database
// lock, dnf's and yum's superuser check.
var InstallFailure = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)` +
		`^E: (?:setgroups|setegid|seteuid|setgid|setuid) -?\d+ failed - \w+ \(1: Operation not permitted\)` +
		`|^E: Could not open lock file /var/(?:lib|cache)/(?:apt|dpkg)/\S+ - open \(13: Permission denied\)` +
		`|^ERROR: Unable to lock database: (?:Permission denied|Operation not permitted)` +
		`|^Error: This command has to be run with superuser privileges`)
})

// Failure returns the one line vak prints after a command that failed
// (exit status exitCode) in a way it can explain, "" otherwise: a package
// install that needs root and capabilities is what [session]
// allow_install in userConfig and `vak session exec --root` are for.
// inSession says the command ran in a session (vak session exec) rather
// than vak run.
func Failure(tail *Tail, exitCode int, inSession bool, userConfig string) string {
	if exitCode == 0 || !tail.matches(InstallFailure()) {
		return ""
	}
	what := "vak run drops"
	if inSession {
		what = "this command did not have"
	}
	return fmt.Sprintf("vak: hint: installing packages needs root with capabilities that %s; [session] allow_install = true in %s gives them to sessions created after it: vak session exec --root ID -- CMD (docs/sessions.md)\n", what, userConfig)
}
