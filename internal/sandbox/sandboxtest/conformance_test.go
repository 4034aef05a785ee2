package sandboxtest

import (
	"os"
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
