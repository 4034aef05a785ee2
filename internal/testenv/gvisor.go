package testenv

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// EnvRequireGVisor turns a missing gVisor runtime into a failure.
const EnvRequireGVisor = "VAK_REQUIRE_GVISOR"

// GVisorRuntime is the name the tests expect gVisor's runsc registered
// under in the Docker Engine (.ci/run registers it; docs/usage.md says how).
const GVisorRuntime = "runsc"

// RequireGVisor skips or fails t unless the Docker daemon lists
// GVisorRuntime among its runtimes, and returns its name.
func RequireGVisor(t testing.TB) string {
	t.Helper()
	RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{json .Runtimes}}").Output()
	var rts map[string]json.RawMessage
	if err == nil {
		err = json.Unmarshal(out, &rts)
	}
	if _, ok := rts[GVisorRuntime]; !ok {
		why := "the Docker Engine lists no " + GVisorRuntime + " runtime (gVisor; .ci/run registers one)"
		if err != nil {
			why += ": docker info: " + strings.TrimSpace(err.Error())
		}
		Missing(t, EnvRequireGVisor, why)
	}
	return GVisorRuntime
}
