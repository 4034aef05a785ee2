package cli

import (
	"os/exec"
	"strings"
	"testing"

	"vak/internal/hints"
	"vak/internal/testenv"
)

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
			if code == 0 || !hints.InstallFailure().MatchString(errs) {
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
		if code == 0 || !hints.InstallFailure().MatchString(errs) || !strings.Contains(errs, "vak: hint: ") || !strings.Contains(errs, "[session] allow_install") || !strings.Contains(errs, "this command did not have") {
			t.Errorf("session exec apt-get update: exit %d, want apt's failure and the hint:\n%s", code, errs)
		}
		if code, _, errs := session(t, cfg, labels, "", "exec", id, "--", "sh", "-c", "echo nope >&2; exit 3"); code != 3 || strings.Contains(errs, "hint") {
			t.Errorf("control: session exec of an unrelated failure: exit %d:\n%s", code, errs)
		}
	})
}
