package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"vak/internal/testenv"
)

// The helpers of the tests that run real clients (agent CLIs, gh, the AWS
// CLI) against local mocks of the services they call.

// codexCLI is the real Codex CLI's native binary ($VAK_TEST_CODEX, else
// codex on PATH, links resolved); a missing one skips the test unless
// VAK_REQUIRE_CODEX=1.
func codexCLI(t *testing.T) string {
	t.Helper()
	codex := os.Getenv(EnvCodex)
	if codex == "" {
		codex, _ = exec.LookPath("codex")
	}
	if codex == "" {
		testenv.Missing(t, EnvRequireCodex, "no Codex CLI (npm install @openai/codex; set "+EnvCodex+" to its native binary)")
	}
	codex, err := filepath.EvalSymlinks(codex)
	if err != nil {
		t.Fatal(err)
	}
	return codex
}
