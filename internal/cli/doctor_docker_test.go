package cli

import (
	"os/exec"
	"strings"
	"testing"

	"vak/internal/testenv"
)

// vak doctor shows the nested Docker sidecar's baseline chosen from the
// real Engine's runtimes (docker info) and session.docker_runtime: here,
// without Sysbox, the capability-listed runc sidecar; "runc" forced;
// "sysbox" required but absent, named as an error with the key; and a
// daemon that does not answer.
func TestDoctorNestedDocker(t *testing.T) {
	testenv.RequireDocker(t)
	rt, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").CombinedOutput()
	if err != nil {
		t.Fatalf("docker info: %v %s", err, rt)
	}
	sysbox := strings.Contains(string(rt), `"sysbox-runc"`)
	autoWhy := "docker info lists no sysbox-runc (runtimes: "
	if sysbox {
		autoWhy = `docker info lists sysbox-runc, not used: "auto" takes Sysbox only when asked for`
	}
	ws := tempWorkspace(t)
	base := "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"" + testenv.Image(t) + "\"\n"
	for _, tc := range []struct {
		name, session string
		want          []string
	}{
		// "auto" is the capability-listed runc sidecar whether or not the
		// Engine lists Sysbox (docs/nested-docker.md: Baseline).
		{"auto", "", []string{"nested docker: off by default (--docker); sidecar baseline capabilities (runc, 16 capabilities", autoWhy, "runc", `session.docker_runtime = "auto"`}},
		{"runc", "[session]\ndocker = true\ndocker_runtime = \"runc\"\n", []string{"nested docker: on for every session (session.docker); sidecar baseline capabilities (runc", "forced by the configuration", `session.docker_runtime = "runc"`}},
		{"sysbox", "[session]\ndocker_runtime = \"sysbox\"\n", []string{`sidecar baseline: session.docker_runtime = "sysbox"`, "lists no sysbox-runc runtime", `install and register Sysbox, or set session.docker_runtime to "auto" or "runc"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if sysbox && tc.name == "sysbox" {
				t.Skip("docker info lists sysbox-runc here: this case expects an Engine without it")
			}
			cfg := writeConfig(t, base+tc.session)
			code, out, errs := vakMain(t, cfg, "doctor", "-w", ws)
			if code != 0 {
				t.Fatalf("doctor exit %d\n%s\n%s", code, out, errs)
			}
			for _, w := range append(tc.want, cfg) {
				if w == cfg && tc.name != "sysbox" {
					continue // the file is named only in the error
				}
				if !strings.Contains(out, w) {
					t.Errorf("doctor output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	t.Run("NoDaemon", func(t *testing.T) {
		t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/none.sock")
		_, out, _ := vakMain(t, writeConfig(t, base), "doctor", "-w", ws)
		if !strings.Contains(out, "nested docker: off by default (--docker); sidecar baseline: ") || !strings.Contains(out, "none.sock") {
			t.Errorf("doctor without a daemon:\n%s", out)
		}
	})
}
