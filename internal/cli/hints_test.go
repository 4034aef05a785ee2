package cli

import (
	"os/exec"
	"strings"
	"testing"

	"vak/internal/testenv"
)

// The hint's matcher: what package managers print without root or
// capabilities, split across output chunks or not, on either stream; not
// an unrelated failure, nor a matching text of a command that succeeded.
func TestFailureHint(t *testing.T) {
	a := &app{userConfig: "/home/u/.config/vak/config.toml"}
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
		{"long output after the error", []string{"E: setgroups 1 failed - setgroups (1: Operation not permitted)\n", strings.Repeat("x", outputTailBytes)}, "stderr", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tail outputTail
			var got strings.Builder
			out := tail.tee(func(_ string, data []byte) { got.Write(data) })
			for _, c := range tc.chunks {
				out(tc.stream, []byte(c))
			}
			if got.String() != strings.Join(tc.chunks, "") {
				t.Fatalf("the output was not passed on: %q", got.String())
			}
			h := a.failureHint(&tail, tc.code, false)
			if (h != "") != tc.hint {
				t.Fatalf("hint %q, want one: %v", h, tc.hint)
			}
			if tc.hint && (!strings.Contains(h, "[session] allow_install = true in "+a.userConfig) || !strings.Contains(h, "vak session exec --root") || strings.Count(h, "\n") != 1 || !strings.HasSuffix(h, "\n")) {
				t.Errorf("hint %q: not one line naming [session] allow_install and the user config", h)
			}
		})
	}
}

// debianImage is the local Debian root (scripts/build-debian-test-image.sh).
const debianImage = "vak-test-debian:bookworm"

// apt-get in a Docker run (vak-test-debian:bookworm, real apt, no network
// needed) fails with apt's own error, and vak adds its one-line hint naming
// [session] allow_install: as root in the container (sandbox.user = root:
// apt's privilege drop, setgroups ... Operation not permitted) and as the
// host user (apt's lock; root's own uid when the test runs as root), and
// in a session (vak session exec). Controls: a successful apt-get, and a
// failure that is not an install's, print no hint.
func TestInstallHint(t *testing.T) {
	testenv.RequireDocker(t)
	if err := exec.Command("docker", "image", "inspect", debianImage).Run(); err != nil {
		testenv.Missing(t, testenv.EnvRequireDocker, debianImage+" is not built: run scripts/build-debian-test-image.sh")
	}
	ws := tempWorkspace(t)
	for _, user := range []string{"root", "host"} {
		cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \""+debianImage+"\"\nuser = \""+user+"\"\n")
		run := func(args ...string) (int, string, string) {
			t.Helper()
			return vakMain(t, cfg, append([]string{"run", "--label", "vak.test=1", "-w", ws, "--"}, args...)...)
		}
		t.Run("run-"+user, func(t *testing.T) {
			code, _, errs := run("apt-get", "update")
			if code == 0 || !installFailure().MatchString(errs) {
				t.Fatalf("apt-get update as %s: exit %d, apt did not fail for want of privileges:\n%s", user, code, errs)
			}
			if !strings.Contains(errs, "vak: hint: ") || !strings.Contains(errs, "[session] allow_install = true in "+cfg) || !strings.Contains(errs, "capabilities that vak run drops") {
				t.Errorf("apt-get update as %s: no hint naming [session] allow_install:\n%s", user, errs)
			}
			if code, _, errs := run("apt-get", "--version"); code != 0 || strings.Contains(errs, "hint") {
				t.Errorf("control: apt-get --version: exit %d:\n%s", code, errs)
			}
			if code, _, errs := run("apt-get", "nosuchoperation"); code == 0 || !strings.Contains(errs, "Invalid operation") || strings.Contains(errs, "hint") {
				t.Errorf("control: an unrelated failure: exit %d:\n%s", code, errs)
			}
		})
	}
	t.Run("session", func(t *testing.T) {
		_, labels := sessionEnv(t)
		cfg := writeConfig(t, "version = 1\n[sandbox]\nimage = \""+debianImage+"\"\n")
		code, out, errs := session(t, cfg, labels, "", "create", "-w", ws, "--task", "hint")
		if code != 0 {
			t.Fatalf("create: %d %s", code, errs)
		}
		id := strings.TrimSpace(out)
		t.Cleanup(func() { session(t, cfg, labels, "", "rm", id) })
		code, _, errs = session(t, cfg, labels, "", "exec", id, "--", "apt-get", "update")
		if code == 0 || !installFailure().MatchString(errs) || !strings.Contains(errs, "vak: hint: ") || !strings.Contains(errs, "[session] allow_install") || !strings.Contains(errs, "this command did not have") {
			t.Errorf("session exec apt-get update: exit %d, want apt's failure and the hint:\n%s", code, errs)
		}
		if code, _, errs := session(t, cfg, labels, "", "exec", id, "--", "sh", "-c", "echo nope >&2; exit 3"); code != 3 || strings.Contains(errs, "hint") {
			t.Errorf("control: session exec of an unrelated failure: exit %d:\n%s", code, errs)
		}
	})
}
