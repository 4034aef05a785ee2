package hints

import (
	"strings"
	"testing"
)

// The hint's matcher: what package managers print without root or
// capabilities, split across output chunks or not, on either stream; not
// an unrelated failure, nor a matching text of a command that succeeded.
func TestFailure(t *testing.T) {
	const userConfig = "/home/u/.config/vak/config.toml"
	for _, tc := range []struct {
		name   string
		chunks []string
		stream string
		code   int
		hint   bool
	}{
		{"apt root without capabilities", []string{"Reading package lists...\n", "E: setgroups 65534 failed - setgroups (1: Operation not permitted)\nE: seteuid 42 failed - seteuid (1: Operation not permitted)\n"}, "stderr", 100, true},
		{"split across chunks", []string{"E: setgroups 0 fail", "ed - setgroups (1: Operation not permitted)\n"}, "stderr", 100, true},
		{"apt without root", []string{"E: Could not open lock file /var/lib/apt/lists/lock - open (13: Permission denied)\nE: Unable to lock directory /var/lib/apt/lists/\n"}, "stderr", 100, true},
		{"dpkg lock without root", []string{"E: Could not open lock file /var/lib/dpkg/lock-frontend - open (13: Permission denied)\n"}, "stderr", 100, true},
		{"apk", []string{"ERROR: Unable to lock database: Permission denied\nERROR: Failed to open apk database: Permission denied\n"}, "stderr", 99, true},
		{"dnf", []string{"Error: This command has to be run with superuser privileges (under the root user on most systems).\n"}, "stderr", 1, true},
		{"on a terminal (stdout)", []string{"E: setegid 65534 failed - setegid (1: Operation not permitted)\r\n"}, "stdout", 100, true},
		// No hint: the command succeeded, or failed otherwise.
		{"succeeded", []string{"E: setgroups 65534 failed - setgroups (1: Operation not permitted)\n"}, "stderr", 0, false},
		{"unrelated failure", []string{"E: Unable to locate package nosuchpackage\n"}, "stderr", 100, false},
		{"quoted, not printed by apt", []string{"grep: 'E: setgroups 1 failed - setgroups (1: Operation not permitted)'\n"}, "stderr", 1, false},
		{"long output after the error", []string{"E: setgroups 1 failed - setgroups (1: Operation not permitted)\n", strings.Repeat("x", TailBytes)}, "stderr", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tail Tail
			var got strings.Builder
			out := tail.Tee(func(_ string, data []byte) { got.Write(data) })
			for _, c := range tc.chunks {
				out(tc.stream, []byte(c))
			}
			if got.String() != strings.Join(tc.chunks, "") {
				t.Fatalf("the output was not passed on: %q", got.String())
			}
			h := Failure(&tail, tc.code, false, userConfig)
			if (h != "") != tc.hint {
				t.Fatalf("hint %q, want one: %v", h, tc.hint)
			}
			if tc.hint && (!strings.Contains(h, "[session] allow_install = true in "+userConfig) || !strings.Contains(h, "vak session exec --root") || strings.Count(h, "\n") != 1 || !strings.HasSuffix(h, "\n")) {
				t.Errorf("hint %q: not one line naming [session] allow_install and the user config", h)
			}
		})
	}
}
