package cli

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// vak doctor as a user who may not use the Docker daemon's socket says so,
// naming the socket, the user and the group to join, on the docker
// backend's line and the nested Docker line alike (one check,
// engine.Unreachable), with every docker CLI here: Debian's 20.10
// (/usr/bin/docker, as CI installs it), whose `docker info --format` said
// "template: ... nil pointer" instead, and the one first on PATH. The
// refused socket is a stub engine's at mode 0 (for root through runuser as
// the unprivileged user; no user but root may connect to it), plus the
// real daemon's when this user may not use it. Control: the same user,
// CLI and stub at mode 0666: the backend is available (server
// stubVersion), with no permission message.
func TestDoctorDockerAccess(t *testing.T) {
	dir, ws := accessTestDir(t)
	sock := stubEngine(t, filepath.Join(dir, "engine.sock"))
	var clis []string
	for _, c := range []string{"/usr/bin/docker", "docker"} {
		p, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		if p, err = filepath.EvalSymlinks(p); err == nil && !slices.Contains(clis, p) {
			clis = append(clis, p)
		}
	}
	if len(clis) == 0 {
		testenv.Missing(t, testenv.EnvRequireDocker, "no docker CLI")
	}
	for _, cli := range clis {
		v, _ := exec.Command(cli, "version", "--format", "{{.Client.Version}}").Output()
		t.Run(strings.TrimSpace(string(v)), func(t *testing.T) {
			t.Logf("docker CLI %s, version %s", cli, strings.TrimSpace(string(v)))
			// A directory (and state dir) per CLI: the probe's cached
			// success of one CLI's control must not answer for the next.
			sub := filepath.Join(dir, "cli-"+strings.TrimSpace(string(v)))
			bin := filepath.Join(sub, "bin")
			os.MkdirAll(bin, 0o755)
			os.Chmod(sub, 0o755)
			os.Symlink(cli, filepath.Join(bin, "docker"))
			doctor := func(host string) string {
				t.Helper()
				_, out := runUnprivileged(t, sub, []string{"PATH=" + bin + ":/usr/bin:/bin", "DOCKER_HOST=" + host}, []string{"doctor", "-w", ws})
				return out
			}
			refused := []string{strings.TrimPrefix(sock, "unix://")}
			if c, err := net.Dial("unix", "/var/run/docker.sock"); err == nil {
				c.Close() // this process may: only root's runuser path refuses it
				if os.Getuid() == 0 {
					refused = append(refused, "/var/run/docker.sock")
				}
			} else if errors.Is(err, syscall.EACCES) {
				refused = append(refused, "/var/run/docker.sock")
			}
			runAs := testenv.UnprivilegedUser(t)
			for _, s := range refused {
				if s == sock {
					os.Chmod(sock, 0)
				}
				out := doctor("unix://" + s)
				os.Chmod(sock, 0o666)
				// The daemon's socket admits its group (docker); the
				// stub at mode 0 only its owner.
				want := "docker daemon unavailable: permission denied on " + s + ": add " + runAs + " to the " + socketGroup(t, s) + " group (usermod -aG " + socketGroup(t, s) + " " + runAs + ", then log in again)"
				if s != "/var/run/docker.sock" {
					want = "docker daemon unavailable: permission denied on " + s + ": only its owner (uid " + strconv.Itoa(os.Getuid()) + ") may connect to it (mode 0)"
				}
				backend, nested := lineOf(out, "  docker "), lineOf(out, "nested docker: ")
				if !strings.Contains(backend, want) || !strings.Contains(nested, want) || strings.Contains(out, "template:") {
					t.Errorf("doctor against %s, which the user may not use:\n%s", s, out)
				}
			}
			out := doctor("unix://" + sock)
			if l := lineOf(out, "  docker "); !strings.Contains(l, "available (server "+stubVersion+")") || strings.Contains(out, "permission denied on ") {
				t.Errorf("control: doctor against the stub the user may use:\n%s", out)
			}
		})
	}
}

// lineOf returns the first line of out that starts with prefix ("" if none).
func lineOf(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// socketGroup names the group that owns the socket at path.
func socketGroup(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := user.LookupGroupId(strconv.FormatUint(uint64(fi.Sys().(*syscall.Stat_t).Gid), 10))
	if err != nil {
		t.Fatal(err)
	}
	return g.Name
}
