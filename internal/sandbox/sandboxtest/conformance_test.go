package sandboxtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/config"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/sandbox/landlock"
	"vak/internal/testenv"
)

func TestLandlockConformance(t *testing.T) {
	testenv.RequireLandlock(t)
	Run(t, func(t *testing.T, cfg *config.Config) sandbox.Backend {
		return &landlock.Backend{}
	})
}

func TestDockerConformance(t *testing.T) {
	img := testenv.Image(t)
	Run(t, func(t *testing.T, cfg *config.Config) sandbox.Backend {
		d := docker.New(img)
		d.User = docker.User{UID: os.Getuid(), GID: os.Getgid()}
		d.Labels = map[string]string{testenv.TestLabel: "1"}
		return d
	})
}

// TestDockerConformanceBashOnly runs the suite as vak run does: the broker
// runs each wrapped docker command itself, with no worker process.
func TestDockerConformanceBashOnly(t *testing.T) {
	img := testenv.Image(t)
	b := func(t *testing.T, cfg *config.Config) sandbox.Backend {
		d := docker.New(img)
		d.User = docker.User{UID: os.Getuid(), GID: os.Getgid()}
		d.Labels = map[string]string{testenv.TestLabel: "1"}
		return d
	}
	t.Run("NoWorkerProcess", func(t *testing.T) {
		bashOnly = true
		defer func() { bashOnly = false }()
		e := NewEnv(t, b)
		s := e.Start(sandbox.WorkspaceWrite)
		if s.Client() != nil || s.Ready().PID != os.Getpid() {
			t.Fatalf("a bash-only docker session started a worker: client %v, ready %+v", s.Client(), s.Ready())
		}
		// The container runs (created from this process: no worker).
		res := Sh(t, s, "echo in-container > marker; cat /proc/1/cmdline | tr '\\0' ' '")
		if res.ExitCode != 0 || !strings.Contains(res.Stdout, "sh -c") {
			t.Fatalf("command: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		if data, _ := os.ReadFile(filepath.Join(e.Workspace, "marker")); string(data) != "in-container\n" {
			t.Fatalf("marker: %q", data)
		}
	})
	RunBashOnly(t, b)
}

// TestGVisorDockerConformance runs the containment checks with the docker
// backend's containers under gVisor (sandbox.runtime = "runsc"), after a
// control that the commands really run on gVisor's kernel and that the
// same backend without the runtime does not.
func TestGVisorDockerConformance(t *testing.T) {
	img := testenv.Image(t)
	runtime := testenv.RequireGVisor(t)
	backend := func(runtime string) Backend {
		return func(t *testing.T, cfg *config.Config) sandbox.Backend {
			d := docker.New(img)
			d.User = docker.User{UID: os.Getuid(), GID: os.Getgid()}
			d.Labels = map[string]string{testenv.TestLabel: "1"}
			d.Runtime = runtime
			return d
		}
	}
	t.Run("KernelIsGVisor", func(t *testing.T) {
		for _, tc := range []struct {
			runtime string
			gvisor  bool
		}{{runtime, true}, {"", false}} {
			s := NewEnv(t, backend(tc.runtime)).Start(sandbox.WorkspaceWrite)
			res := Sh(t, s, "dmesg 2>&1 | head -1")
			if strings.Contains(res.Stdout, "Starting gVisor") != tc.gvisor {
				t.Fatalf("runtime %q: the kernel log begins %q (exit %d, %s), want gVisor's: %v", tc.runtime, res.Stdout, res.ExitCode, res.Stderr, tc.gvisor)
			}
		}
	})
	RunContainment(t, backend(runtime))
}
