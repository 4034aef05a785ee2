package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"vak/internal/engine"
	"vak/internal/testenv"
)

// Exec against a real container: stdout and stderr apart or together, the
// exit status of a failing command as an *ExitError, a command that cannot
// be started, and a container that does not exist.
func TestExec(t *testing.T) {
	img := testenv.Image(t)
	id, _ := testenv.RunContainer(t, testenv.UniqueName("exec"), "none", img, "sleep", "3600")
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	tests := []struct {
		name       string
		container  string
		cmd        []string
		combined   bool
		wantOut    string
		wantErrOut string
		wantCode   int // -1: an error that is not an *ExitError
		wantErr    string
	}{
		{"stdout and stderr apart", id, []string{"sh", "-c", "echo out; echo err >&2"}, false, "out\n", "err\n", 0, ""},
		{"stdout and stderr together", id, []string{"sh", "-c", "echo out; echo err >&2"}, true, "err\nout\n", "", 0, ""},
		{"failing command", id, []string{"sh", "-c", "echo partial; echo why >&2; exit 3"}, false, "partial\n", "why\n", 3, "sh in container " + id + ": exit status 3"},
		{"no such program", id, []string{"/no/such/program"}, false, "", "", 126, ""},
		{"no such container", "vaktest-no-such-container", []string{"true"}, false, "", "", -1, "exec true in container vaktest-no-such-container: "},
		{"empty command", id, nil, false, "", "", -1, "empty command"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			stderr := &errOut
			if tc.combined {
				stderr = &out
			}
			err := engine.Exec(context.Background(), cli, tc.container, &out, stderr, tc.cmd...)
			var ee *engine.ExitError
			switch {
			case tc.wantCode == 0 && err != nil:
				t.Fatalf("Exec: %v", err)
			case tc.wantCode > 0 && (!errors.As(err, &ee) || ee.Code < tc.wantCode || tc.wantCode == 3 && ee.Code != 3):
				t.Fatalf("Exec = %v, want exit status %d", err, tc.wantCode)
			case tc.wantCode < 0 && (err == nil || errors.As(err, &ee)):
				t.Fatalf("Exec = %v, want an error that is not an exit status", err)
			}
			if tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Exec = %v, want it to say %q", err, tc.wantErr)
			}
			gotOut := out.String()
			if tc.combined { // the two streams' order is the container's
				lines := strings.SplitAfter(gotOut, "\n")
				slices.Sort(lines)
				gotOut = strings.Join(lines, "")
			}
			if tc.wantCode < 126 && (gotOut != tc.wantOut || errOut.String() != tc.wantErrOut) {
				t.Errorf("stdout %q, stderr %q; want %q, %q", out.String(), errOut.String(), tc.wantOut, tc.wantErrOut)
			}
		})
	}
}
