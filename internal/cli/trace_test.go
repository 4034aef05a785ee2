package cli

import (
	"strings"
	"testing"

	"vak/internal/trace"
)

// TestRunTrace checks that --trace and VAK_TRACE=1 print every phase of a
// run to stderr after the command's own output, and that a run without
// either prints none.
func TestRunTrace(t *testing.T) {
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n")
	phases := []string{"cli start", "config", "backend check", "backend prepare", "worker start (sandbox set-up) to ready",
		// From the times in the worker's ready event.
		"  worker process start (landlock: stage 1, view, stage 2 exec)", "  sandbox entry (landlock: stage 2 restrictions)", "  worker files and ready message",
		"command", "teardown", "  worker exit", "  temp dir and backend cleanup", "stale cleanup (what is left of it at the end)", "total"}
	tests := []struct {
		name  string
		env   string
		args  []string
		trace bool
	}{
		{"flag", "", []string{"--trace"}, true},
		{"environment", "1", nil, true},
		{"neither", "", nil, false},
		{"environment not 1", "yes", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(trace.EnvVar, tc.env)
			args := append([]string{"run", "-w", ws, "--mode", "full-access"}, tc.args...)
			args = append(args, "--", "sh", "-c", "echo from-the-command >&2")
			code, _, errs := vakMain(t, cfg, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if !tc.trace {
				if strings.Contains(errs, "vak trace:") {
					t.Fatalf("trace printed without being asked for:\n%s", errs)
				}
				return
			}
			cmdOut := strings.Index(errs, "from-the-command")
			for _, p := range phases {
				i := strings.Index(errs, "vak trace: "+p+" +")
				if i < 0 {
					t.Fatalf("no %q phase in:\n%s", p, errs)
				}
				if i < cmdOut {
					t.Fatalf("phase %q printed before the command's output:\n%s", p, errs)
				}
			}
		})
	}
}
