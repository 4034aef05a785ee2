package sandboxtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/config"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/testenv"
)

// As root in its container (sandbox.docker root), a command cannot set the
// setuid or setgid bit through any call that sets a mode: the docker
// backend's seccomp profile refuses each one. The probe's plain chmod is
// the control, and the same attempts succeed on the host (the probe's own
// tests of these calls run in this test too, outside the sandbox).
func TestDockerSetuidAttempts(t *testing.T) {
	img := testenv.Image(t)
	e := NewEnv(t, func(t *testing.T, cfg *config.Config) sandbox.Backend {
		d := docker.New(img)
		d.User = docker.User{Root: true}
		d.Labels = map[string]string{testenv.TestLabel: "1"}
		return d
	})
	attempts := []string{"setuid-chmod", "setgid-chmod", "setuid-fchmod", "setuid-fchmodat", "setuid-fchmodat2",
		"setuid-openat-creat", "setgid-openat-creat", "setuid-mknodat"}
	// Control on the host: every attempt works without the sandbox.
	hostDir := t.TempDir()
	for _, a := range append([]string{"chmod-plain", "setuid-openat2-creat"}, attempts...) {
		out := HostProbeIn(t, e, hostDir, "attempt", a)
		if !strings.Contains(out, "OK "+a+" succeeded") {
			t.Fatalf("control: %s fails even on the host: %s", a, out)
		}
	}
	s := e.Start(sandbox.WorkspaceWrite)
	if r := Sh(t, s, "id -u; ./probe attempt chmod-plain"); !strings.Contains(r.Stdout, "OK chmod-plain succeeded") || !strings.HasPrefix(r.Stdout, "0\n") {
		t.Fatalf("control: a plain chmod as root in the container failed: %+v", r)
	}
	for _, a := range attempts {
		r := Sh(t, s, "./probe attempt "+a)
		if r.ExitCode != 1 || strings.Contains(r.Stdout, "succeeded") {
			t.Errorf("%s was not refused: exit %d %q %q", a, r.ExitCode, r.Stdout, r.Stderr)
		}
		if fi, err := os.Stat(filepath.Join(e.Workspace, a)); err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s left %v on the host", a, fi.Mode())
		}
	}
	// openat2's mode is behind a pointer the filter cannot read: the call
	// succeeds, and the tripwire clears the bit after the command.
	r := Sh(t, s, "./probe attempt setuid-openat2-creat")
	if fi, err := os.Stat(filepath.Join(e.Workspace, "setuid-openat2-creat")); err != nil || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("openat2 left %v, %v on the host", fi, err)
	}
	if strings.Contains(r.Stdout, "succeeded") && len(r.SetuidCleared) != 1 {
		t.Errorf("the setuid file made through openat2 was not reported: %+v", r)
	}
}
