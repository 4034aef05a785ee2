package entry

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"vak/internal/sandbox"
)

func TestParseArgs(t *testing.T) {
	w := sandbox.WorkerCommand
	for _, c := range []struct {
		args  []string
		stage int // 0: refused
	}{
		{[]string{w}, 1},
		{[]string{w, "--stage", "2"}, 2},
		{[]string{w, "--stage=2"}, 2},
		{[]string{w, "--stage", "1"}, 1},
		{nil, 0},
		{[]string{"version"}, 0},
		{[]string{w, "--container"}, 0}, // the docker backend's worker is vak's
		{[]string{w, "--stage"}, 0},
		{[]string{w, "--stage", "0"}, 0},
		{[]string{w, "--stage", "-1"}, 0},
		{[]string{w, "--stage", "two"}, 0},
		{[]string{w, "--stage", "2", "extra"}, 0},
		{[]string{"--stage", "2", w}, 0},
	} {
		got, err := parseArgs(c.args)
		if c.stage == 0 {
			if err == nil {
				t.Errorf("parseArgs(%q) = %d, want refused", c.args, got)
			}
			continue
		}
		if err != nil || got != c.stage {
			t.Errorf("parseArgs(%q) = %d, %v; want %d", c.args, got, err, c.stage)
		}
	}
}

func TestMainRefusesOtherCommandLines(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"run", "--", "true"}, strings.NewReader(""), &out, &errb)
	if code != ExitUsage || !strings.Contains(errb.String(), "lean stage program") || out.Len() != 0 {
		t.Fatalf("Main(run) = %d, stdout %q, stderr %q; want %d and the usage on stderr", code, out.String(), errb.String(), ExitUsage)
	}
}
