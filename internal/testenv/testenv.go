// Package testenv decides whether tests that need real components (a Docker
// daemon, Landlock) run, skip, or fail.
//
// Locally a missing component skips the test with a message that says how to
// provide it. In CI, VAK_REQUIRE_DOCKER=1 and VAK_REQUIRE_LANDLOCK=1 turn those
// skips into failures, so nothing that matters can silently skip.
package testenv

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables that turn skips into failures.
const (
	EnvRequireDocker   = "VAK_REQUIRE_DOCKER"
	EnvRequireLandlock = "VAK_REQUIRE_LANDLOCK"
	// EnvTestImage overrides the image Docker tests run (default TestImage).
	EnvTestImage = "VAK_TEST_IMAGE"
)

// TestImage is the image scripts/build-test-images.sh builds: FROM scratch,
// busybox-static, the probe program from scripts/probe (/bin/probe) and the
// hermetic test "internet" from scripts/testnet (/bin/testnet; see
// TestNetImage).
const TestImage = "vak-test:latest"

// TestLabel marks every Docker object a test creates, so leftovers can be
// found and removed by label.
const TestLabel = "vak.test"

// Required reports whether the named environment variable demands the
// component (set to 1, true or yes).
func Required(env string) bool {
	switch strings.ToLower(os.Getenv(env)) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// Missing skips t, or fails it when env demands the component.
func Missing(t testing.TB, env, why string) {
	t.Helper()
	if Required(env) {
		t.Fatalf("%s=1 but the component is unavailable: %s", env, why)
	}
	t.Skipf("skipping: %s (set %s=1 to make this a failure)", why, env)
}

var (
	dockerOnce sync.Once
	dockerErr  string
)

// RequireDocker skips or fails t unless a Docker daemon answers `docker info`.
func RequireDocker(t testing.TB) {
	t.Helper()
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput()
		if err != nil {
			dockerErr = "no Docker daemon reachable: " + strings.TrimSpace(string(out)) + " " + err.Error()
		}
	})
	if dockerErr != "" {
		Missing(t, EnvRequireDocker, dockerErr)
	}
}

// Image returns the test image name and skips or fails t when it is not built.
func Image(t testing.TB) string {
	t.Helper()
	RequireDocker(t)
	img := os.Getenv(EnvTestImage)
	if img == "" {
		img = TestImage
	}
	if err := exec.Command("docker", "image", "inspect", img).Run(); err != nil {
		Missing(t, EnvRequireDocker, "test image "+img+" is not built: run scripts/build-test-images.sh")
	}
	return img
}
