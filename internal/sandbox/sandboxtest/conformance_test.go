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
