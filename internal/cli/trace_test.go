package cli

import (
	"fmt"
	"strings"
	"testing"

	"vak/internal/testenv"
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

// TestRunTraceLandlock checks that a native run's trace splits the worker's
// start by what stage 1 measured (its own start-up, the view, stage 2's
// start), each phase inside the worker's start and in order.
func TestRunTraceLandlock(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"landlock\"\n")
	code, _, errs := vakMain(t, cfg, "run", "--trace", "-w", ws, "--", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	phases := []string{"worker start (sandbox set-up) to ready", "  worker process start (landlock: stage 1, view, stage 2 exec)",
		"    stage 1 process start (exec, Go start-up)", "    stage 1 view", "    stage 2 process start (exec, Go start-up)",
		"  sandbox entry (landlock: stage 2 restrictions)"}
	var starts []float64
	for _, p := range phases {
		i := strings.Index(errs, "vak trace: "+p+" +")
		if i < 0 {
			t.Fatalf("no %q phase in:\n%s", p, errs)
		}
		var start, dur float64
		line := errs[i+len("vak trace: "+p+" +"):]
		if _, err := fmt.Sscanf(line, "%fms %fms", &start, &dur); err != nil {
			t.Fatalf("phase %q: %v in %q", p, err, line)
		}
		starts = append(starts, start)
	}
	// Stage 1's phases follow each other, and stage 2's restrictions
	// come after them.
	for i := 3; i < len(starts); i++ {
		if starts[i] < starts[i-1] {
			t.Fatalf("phase %q starts before %q:\n%s", phases[i], phases[i-1], errs)
		}
	}
}
