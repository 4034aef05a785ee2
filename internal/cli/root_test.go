package cli

import (
	"testing"

	"github.com/spf13/pflag"

	"vak/internal/leanstage/entry"
	"vak/internal/sandbox"
)

// TestWorkerRoot checks that the re-executed worker's own root (Main's
// fast path for `vak __worker`) parses exactly what the full command tree
// does for it: the same flags, persistent ones included, with the same
// defaults.
func TestWorkerRoot(t *testing.T) {
	a := &app{}
	full, _, err := a.newRoot().Find([]string{sandbox.WorkerCommand})
	if err != nil {
		t.Fatal(err)
	}
	fast, _, err := a.newWorkerRoot().Find([]string{sandbox.WorkerCommand})
	if err != nil {
		t.Fatal(err)
	}
	collect := func(fs *pflag.FlagSet) map[string]string {
		m := map[string]string{}
		fs.VisitAll(func(f *pflag.Flag) { m[f.Name] = f.Value.Type() + "=" + f.DefValue })
		return m
	}
	want, got := collect(full.Flags()), collect(fast.Flags())
	for k, v := range collect(full.InheritedFlags()) {
		want["inherited "+k] = v
	}
	for k, v := range collect(fast.InheritedFlags()) {
		got["inherited "+k] = v
	}
	if len(want) == 0 {
		t.Fatal("control: the full tree's worker command has no flags")
	}
	if len(want) != len(got) {
		t.Fatalf("worker flags differ: full tree %v, worker root %v", want, got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("worker flag %s: full tree %q, worker root %q", k, v, got[k])
		}
	}
	// Through Main: an unknown flag is a usage error either way.
	if code, _, errs := vakMain(t, "", sandbox.WorkerCommand, "--no-such-flag"); code != ExitUsage {
		t.Fatalf("__worker --no-such-flag: exit %d: %s", code, errs)
	}
}

// The lean stage program (leanstage/entry) runs the worker command when
// vak embeds it, vak itself otherwise: both end with the same statuses.
func TestLeanStageExitStatuses(t *testing.T) {
	if entry.ExitUsage != ExitUsage || entry.ExitInternal != ExitInternal {
		t.Fatalf("lean stage program exits %d (usage) and %d (internal), vak %d and %d", entry.ExitUsage, entry.ExitInternal, ExitUsage, ExitInternal)
	}
}
