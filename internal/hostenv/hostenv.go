// Package hostenv is the one allowlist of host environment variables that
// reach sandboxed commands, and the helpers that read and edit
// environments: every backend (native, docker run, sessions) takes its
// commands' host variables from here, so a command sees the same ones
// whichever backend runs it.
//
// Everything else in the host environment (tokens, cloud credentials, SSH
// agent sockets) is scrubbed; the trusted configuration names more
// (sandbox.env).
package hostenv

import (
	"os"
	"slices"
	"strings"
)

// portable are the variables every backend passes: the locale (LC_ALL
// included: it overrides LANG, and a command that sees LANG without the
// user's LC_ALL sorts and formats unlike the same command outside), the
// time zone and the terminal's capabilities. None names the host's
// filesystem or identity.
var portable = []string{"LANG", "LANGUAGE", "LC_ALL", "TERM", "TZ", "COLORTERM", "NO_COLOR"}

// hostOnly are the variables that describe the host's filesystem and user:
// they mean something only where the command runs on the host's own view
// as its user (process-scoped backends); a container has its image's PATH
// and its own user.
var hostOnly = []string{"PATH", "USER", "LOGNAME"}

// DefaultPath is PATH when neither the host nor the image sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Allowlist returns the names of the host variables that reach the commands
// of every backend, followed by extra (configured names).
func Allowlist(extra ...string) []string {
	return append(slices.Clone(portable), extra...)
}

// ProcessAllowlist returns Allowlist plus the host-only names (PATH, USER,
// LOGNAME) that a process-scoped backend also passes, followed by extra.
func ProcessAllowlist(extra ...string) []string {
	return append(append(Allowlist(), hostOnly...), extra...)
}

// Lookup returns NAME=VALUE for each name set in this process's
// environment, in the order given, each name once.
func Lookup(names []string) []string {
	var env []string
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok && !Has(env, n) {
			env = append(env, n+"="+v)
		}
	}
	return env
}

// ForProcess is the host part of the environment of a process-scoped
// backend's commands: ProcessAllowlist(extra...) from this process, with
// DefaultPath when PATH is unset (the backend adds HOME and TMPDIR).
func ForProcess(extra ...string) []string {
	return WithDefaultPath(Lookup(ProcessAllowlist(extra...)))
}

// ForContainer is the host part of the environment of a container's
// commands: Allowlist(extra...) from this process (the image sets PATH,
// the backend HOME and TMPDIR).
func ForContainer(extra ...string) []string {
	return Lookup(Allowlist(extra...))
}

// WithDefaultPath returns env with PATH=DefaultPath appended when it sets
// no PATH.
func WithDefaultPath(env []string) []string {
	if Has(env, "PATH") {
		return env
	}
	return append(env, "PATH="+DefaultPath)
}

// Has reports whether env (NAME=VALUE entries) sets name.
func Has(env []string, name string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// Set returns env with kv (NAME=VALUE) replacing every entry of its name,
// at the end.
func Set(env []string, kv string) []string {
	name, _, _ := strings.Cut(kv, "=")
	env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") })
	return append(env, kv)
}
