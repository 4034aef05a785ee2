package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"vak/internal/testenv"
)

// allocScript starts n processes that each allocate mib MiB (dd reads that
// much of /dev/zero into one buffer, so all of it is resident) and hold it
// (dd blocks writing it into a pipe nobody reads yet); once each has
// either allocated or died, all are released together. Per process, its
// file says "held" once it allocated and "dd STATUS" when dd ended: a dd
// that ends 0 held its memory until the release, at the same time as every
// other that ends 0.
func allocScript(n, mib int) string {
	return fmt.Sprintf(`rm -f release st*
for i in $(seq %[1]d); do
  ( { dd if=/dev/zero bs=%[2]dM count=1 2>/dev/null; echo "dd $?" >>st$i; } | { [ "$(head -c1 | wc -c)" = 1 ] && echo held >>st$i; while [ ! -e release ]; do sleep 0.05; done; cat >/dev/null; } ) &
done
i=0
while [ $i -lt 1200 ]; do
  n=0; for f in st*; do [ -s "$f" ] && n=$((n+1)); done
  [ $n -ge %[1]d ] && break
  sleep 0.05; i=$((i+1))
done
touch release; wait
for f in st*; do echo "$f: $(tr '\n' ' ' <$f)"; done`, n, mib)
}

// doctorLine is doctor's line starting with prefix.
func doctorLine(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("doctor has no line %q:\n%s", prefix, out)
	return ""
}

// What vak doctor says about the memory, process and CPU limits is what
// `vak run` gets. Three processes of 48 MiB under a 96 MiB limit: with a
// memory cgroup (root; a user with a delegated cgroup) at most one holds
// its memory to the end and the others are killed, and doctor says
// "in total (... cgroup ...)"; without one (a user without delegation)
// all three hold 144 MiB at once and doctor says "per process
// (RLIMIT_DATA ...)" and that the total is NOT limited. Controls: one
// such process alone holds its memory in both cases, and one of 128 MiB
// fails (RLIMIT_DATA, per process, in both). VAK_TEST_CGROUP
// (testenv.ExpectedLimits) pins which case this must be.
func TestRunLimitsMatchDoctor(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	cfg := writeConfig(t, "version = 1\n[sandbox.limits]\nmemory = \"96m\"\npids = 64\ncpus = 0.5\n")
	code, out, errs := vakMain(t, cfg, "doctor", "-w", ws)
	if code != 0 {
		t.Fatalf("doctor: exit %d %s %s", code, out, errs)
	}
	memory, cpus := doctorLine(t, out, "limits: memory "), doctorLine(t, out, "limits: cpus ")
	byCgroup := strings.HasPrefix(memory, "limits: memory 96 MiB in total (each session's own cgroup v")
	if !byCgroup && !strings.HasPrefix(memory, "limits: memory 96 MiB per process (RLIMIT_DATA") || !byCgroup && !strings.Contains(memory, "total is NOT limited") {
		t.Fatalf("doctor's memory line says neither a cgroup nor RLIMIT_DATA: %s", memory)
	}
	if byCgroup != strings.HasPrefix(cpus, "limits: cpus 0.5 (CPU quota 50000 µs per 100000 µs; each session's own cgroup") || !byCgroup && !strings.Contains(cpus, "NOT enforced") {
		t.Errorf("doctor's cpus line disagrees with its memory line (%s): %s", memory, cpus)
	}
	switch want := testenv.ExpectedLimits(t); {
	case want == testenv.LimitsByCgroup && !byCgroup:
		t.Fatalf("this test must run with a cgroup for the sandbox (%s=%q, uid %d), but doctor says: %s", testenv.EnvCgroup, os.Getenv(testenv.EnvCgroup), os.Getuid(), memory)
	case want == testenv.LimitsByRlimits && byCgroup:
		t.Fatalf("this test must run without a delegated cgroup (%s=none), but doctor says: %s", testenv.EnvCgroup, memory)
	}
	run := func(script string) string {
		t.Helper()
		code, out, errs := vakMain(t, cfg, "run", "-w", ws, "--timeout", "2m", "--", "sh", "-c", script)
		if code != 0 {
			t.Fatalf("vak run: exit %d: %q %q", code, out, errs)
		}
		return out
	}
	// Controls: one 48 MiB process alone holds its memory to the end; a
	// 128 MiB one fails by RLIMIT_DATA (96 MiB per process) either way.
	if got := run(allocScript(1, 48)); !strings.Contains(got, "st1: held dd 0") {
		t.Fatalf("control: one process of 48 MiB under a 96 MiB limit did not hold it: %s", got)
	}
	if got := run("dd if=/dev/zero of=/dev/null bs=128M count=1 2>&1; echo dd $?"); strings.Contains(got, "dd 0") {
		t.Errorf("a 128 MiB buffer under RLIMIT_DATA of 96 MiB did not fail: %s", got)
	}
	got := run(allocScript(3, 48))
	survivors := strings.Count(got, "dd 0")
	switch {
	case byCgroup && (survivors > 1 || !strings.Contains(got, "dd 137")):
		t.Errorf("doctor says %q, but %d processes of 48 MiB held their memory at once (killed ones end with dd 137):\n%s", memory, survivors, got)
	case !byCgroup && (survivors != 3 || strings.Count(got, "held") != 3):
		t.Errorf("doctor says %q, but not all three processes of 48 MiB held their memory at once:\n%s", memory, got)
	}
	t.Logf("doctor: %s\n%s", memory, got)
}

// The process limit is what doctor says, "pids 64 in total": a command
// that starts more children than that fails, fewer succeed (control), and
// the count is the sandbox's own: a second sandbox starts as many while
// the first one's children still run (also with RLIMIT_NPROC alone, which
// the kernel counts per user namespace).
func TestRunPidsLimitMatchesDoctor(t *testing.T) {
	testenv.RequireLandlock(t)
	ws := tempWorkspace(t)
	probe := filepath.Join(ws, "probe")
	data, err := os.ReadFile(testenv.Probe(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(probe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "version = 1\n[sandbox.limits]\npids = 64\n")
	code, out, errs := vakMain(t, cfg, "doctor", "-w", ws)
	pids := doctorLine(t, out, "limits: pids ")
	if code != 0 || !strings.HasPrefix(pids, "limits: pids 64 in total (") {
		t.Fatalf("doctor: exit %d %s: %s", code, errs, pids)
	}
	// The first sandbox's 40 children keep running (a process of its own,
	// interrupted at the end, so that it removes its cgroup).
	marker := fmt.Sprintf("300.%d", time.Now().UnixNano()%1_000_000_000)
	first := exec.Command(workerExecutable, "--config", cfg, "run", "-w", ws, "--", "./probe", "sleep-tree", "40", marker)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		first.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { first.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			first.Process.Kill()
			<-done
		}
	})
	waitFor(t, "the first sandbox's 40 children", func() bool { return len(sleepers(marker)) == 40 })
	_, out, _ = vakMain(t, cfg, "run", "-w", ws, "--timeout", "3s", "--", "./probe", "sleep-tree", "40", "30")
	if n := strings.Count(out, "child "); n != 40 {
		t.Errorf("a second sandbox started %d of 40 children while the first one's 40 ran: its limit is not its own:\n%s", n, out)
	}
	_, out, _ = vakMain(t, cfg, "run", "-w", ws, "--timeout", "10s", "--", "./probe", "sleep-tree", "100", "30")
	if n := strings.Count(out, "child "); n == 0 || n >= 64 || !strings.Contains(out, "resource temporarily unavailable") {
		t.Errorf("100 children under %q: %d started:\n%s", pids, n, out)
	}
}
