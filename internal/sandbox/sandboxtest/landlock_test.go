package sandboxtest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/config"
	"vak/internal/sandbox"
	"vak/internal/sandbox/landlock"
	"vak/internal/testenv"
	"vak/internal/worker/wire"
)

func landlockBackend(t *testing.T) Backend {
	t.Helper()
	testenv.RequireLandlock(t)
	return func(t *testing.T, cfg *config.Config) sandbox.Backend { return &landlock.Backend{} }
}

// Every kernel operation the seccomp filter removes is attempted from
// inside; the same probe's permitted operations succeed (control), setsid
// among them: a command's descendant may leave its session (the
// supervisor records it, see TimeoutKillsProcessTree).
func TestLandlockSeccompAttempts(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	s := e.Start(sandbox.WorkspaceWrite)
	for _, a := range []string{"socket-unix", "setsid"} {
		if r := Sh(t, s, "./probe attempt "+a); !strings.Contains(r.Stdout, "OK "+a+" succeeded") {
			t.Fatalf("control attempt %s failed: %+v", a, r)
		}
	}
	for _, a := range []string{
		"socket-inet", "socket-inet6", "socket-packet", "socket-raw", "socket-vsock", "socket-unix-raw",
		"ptrace-parent", "io_uring", "unshare-user", "unshare-net", "clone-newuser", "clone-parent", "mount",
		"keyctl", "bpf", "tiocsti", "personality", "chroot", "open-by-handle",
	} {
		r := Sh(t, s, "./probe attempt "+a)
		if r.ExitCode != 1 || !strings.Contains(r.Stdout, "FAIL") || strings.Contains(r.Stdout, "succeeded") {
			t.Errorf("%s was not refused: exit %d %q %q", a, r.ExitCode, r.Stdout, r.Stderr)
		}
	}
}

// A fork bomb is contained: it is killed at its timeout and the worker (and
// the host running this test) keep working.
func TestLandlockForkBombBounded(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	e.Config.Sandbox.Limits.Pids = 64
	s := e.Start(sandbox.WorkspaceWrite)
	// exec: the command's shell needs no fork of its own to outlive the
	// bomb (a sleep it forked once the bomb held every process slot failed,
	// and the shell ended before its timeout).
	r := ShArgs(t, s, wire.BashArgs{Command: `bomb() { bomb | bomb & }; bomb; exec sleep 100`, TimeoutMS: 4000})
	if !r.TimedOut {
		t.Fatalf("bomb was not stopped by the timeout: %+v", r)
	}
	if got := Sh(t, s, "echo alive"); strings.TrimSpace(got.Stdout) != "alive" {
		t.Fatalf("worker unusable after the fork bomb: %+v", got)
	}
}

// The process limit is enforced: spawning more children than it allows
// fails with EAGAIN, while fewer succeed.
func TestLandlockProcessLimit(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	e.Config.Sandbox.Limits.Pids = 64
	s := e.Start(sandbox.WorkspaceWrite)
	// Control first: fewer children than the limit all start (and die with
	// the command at its timeout, freeing the slots).
	r := ShArgs(t, s, wire.BashArgs{Command: "./probe sleep-tree 20 30", TimeoutMS: 3000})
	if strings.Count(r.Stdout, "child ") != 20 {
		t.Fatalf("control: 20 children under a limit of 64: %s", truncate(r.Stdout))
	}
	r = ShArgs(t, s, wire.BashArgs{Command: "./probe sleep-tree 100 30", TimeoutMS: 20000})
	if !strings.Contains(r.Stdout, "resource temporarily unavailable") {
		t.Fatalf("100 children under a limit of 64 did not fail: exit %d %s", r.ExitCode, truncate(r.Stdout))
	}
	started := strings.Count(r.Stdout, "child ")
	if started == 0 || started >= 64 {
		t.Fatalf("started %d children before the limit, want 1..63", started)
	}
}

// The sandbox sees only its own processes; the host's (this test) are not
// in its /proc.
func TestLandlockPIDIsolation(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	s := e.Start(sandbox.WorkspaceWrite)
	me := strconv.Itoa(os.Getpid())
	r := Sh(t, s, "ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/"+me+"/environ 2>&1 | head -c 200; echo; cat /proc/1/cmdline | tr '\\0' ' '")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	n, _ := strconv.Atoi(strings.TrimSpace(lines[0]))
	if n == 0 || n > 20 {
		t.Errorf("sandbox sees %d processes, want only its own few:\n%s", n, r.Stdout)
	}
	if strings.Contains(r.Stdout, "HOME=") || strings.Contains(r.Stdout, "PATH=/") && strings.Contains(r.Stdout, "GOFLAGS") {
		t.Errorf("host process environment visible: %s", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "__worker") {
		t.Errorf("pid 1 should be the sandbox's own init (vak __worker): %q", r.Stdout)
	}
}

// Hard links cannot smuggle a file from outside the view into the workspace,
// and rename across the view's boundary fails.
func TestLandlockLinksAndRenames(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	s := e.Start(sandbox.WorkspaceWrite)
	before, err := os.ReadFile("/etc/hostname")
	if err != nil {
		t.Skip("no /etc/hostname on this host")
	}
	r := Sh(t, s, fmt.Sprintf(`ln '%s' stolen 2>&1; ln /etc/hostname hn 2>&1; rm -f /etc/hostname 2>&1; mv /etc/hostname here 2>&1; ln -s /etc/passwd pw && cat pw >/dev/null && echo SYMLINK-TO-SYSTEM-OK; echo done`, e.Secret))
	if !strings.Contains(r.Stdout, "done") {
		t.Fatalf("command did not run: %+v", r)
	}
	for _, p := range []string{"stolen", "hn"} {
		if _, err := os.Stat(e.Workspace + "/" + p); err == nil {
			t.Errorf("hard link %s was created in the workspace", p)
		}
	}
	// mv across the boundary may copy (reading is allowed) but never removes
	// the original.
	if after, err := os.ReadFile("/etc/hostname"); err != nil || string(after) != string(before) {
		t.Errorf("/etc/hostname changed or vanished: %v", err)
	}
	// Reading system files through a symlink is fine (they are readable anyway).
	if !strings.Contains(r.Stdout, "SYMLINK-TO-SYSTEM-OK") {
		t.Errorf("control: symlink to a system file unreadable: %s", r.Stdout)
	}
}

func truncate(s string) string {
	if len(s) > 300 {
		return "..." + s[len(s)-300:]
	}
	return s
}

// Every command's fork child calls setsid, which the seccomp filter turns
// into a notification answered outside the worker. If the answer came from
// the worker itself, a stop-the-world garbage collection during a fork would
// deadlock it (found by a benchmark). Many commands against a worker that
// collects garbage constantly must all finish.
func TestLandlockManyCommandsUnderGC(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	testenv.Vak(t) // built with the usual GOGC, not the worker's
	t.Setenv("GOGC", "1")
	s := e.Start(sandbox.WorkspaceWrite)
	for i := 0; i < 400; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r, err := s.Bash(ctx, wire.BashArgs{Command: "true"}, nil)
		cancel()
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("command %d: %v %+v (a hang here is the setsid deadlock)", i, err, r)
		}
	}
}

// The view works for whoever runs vak: host files the user cannot read
// (/etc/shadow is 0640 root:shadow) are empty placeholders, never a reason
// to fail. The workspace and the writable tmpfs mounts are nosuid, and /tmp
// is a tmpfs (bounded by sandbox.limits.tmpfs, see Hardening/TmpBounded),
// not the host's disk. HOME is a tmpfs with --home fresh, and the
// persistent home (a nosuid, nodev bind of its directory) otherwise.
func TestLandlockViewMounts(t *testing.T) {
	fi, err := os.Stat("/etc/shadow")
	if err != nil || fi.Size() == 0 {
		t.Skip("control impossible: no non-empty /etc/shadow on this host")
	}
	for _, home := range []sandbox.HomeKind{sandbox.HomeFresh, sandbox.HomeWorkspace} {
		t.Run(string(home), func(t *testing.T) { testViewMounts(t, home) })
	}
}

func testViewMounts(t *testing.T, home sandbox.HomeKind) {
	e := NewEnv(t, landlockBackend(t))
	e.Config.Sandbox.Home = sandbox.HomeChoice{Kind: home}
	s := e.Start(sandbox.WorkspaceWrite)
	r := Sh(t, s, `wc -c < /etc/shadow; cat /proc/self/mountinfo`)
	lines := strings.SplitN(r.Stdout, "\n", 2)
	if strings.TrimSpace(lines[0]) != "0" {
		t.Errorf("/etc/shadow in the view has %s bytes, want an empty placeholder (%q)", lines[0], r.Stderr)
	}
	mounts := map[string][]string{} // mount point -> options and fs type
	for _, l := range strings.Split(r.Stdout, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 10 {
			continue
		}
		sep := slices.Index(f, "-")
		if sep < 0 || sep+1 >= len(f) {
			continue
		}
		mounts[f[4]] = append(strings.Split(f[5], ","), "type="+f[sep+1])
	}
	homeWant := []string{"nosuid", "nodev", "rw", "type=tmpfs"}
	if home != sandbox.HomeFresh {
		homeWant = []string{"nosuid", "nodev", "rw"}
		if slices.Contains(mounts[e.Home], "type=tmpfs") {
			t.Errorf("the persistent home is a tmpfs: %v", mounts[e.Home])
		}
	}
	for mp, want := range map[string][]string{
		e.Workspace: {"nosuid", "rw"},
		"/tmp":      {"nosuid", "type=tmpfs"},
		"/dev/shm":  {"nosuid", "type=tmpfs"},
		e.Home:      homeWant,
	} {
		opts, ok := mounts[mp]
		if !ok {
			t.Errorf("no mount at %s in the view:\n%s", mp, r.Stdout)
			continue
		}
		for _, w := range want {
			if !slices.Contains(opts, w) {
				t.Errorf("mount %s has %v, want %s", mp, opts, w)
			}
		}
	}
}

// Where sessions get a cgroup of their own (always as root; for a user
// whose cgroup is delegated, which scripts/test-nonroot arranges for one
// leg with VAK_TEST_CGROUP=delegated), stage 1 joins it while it starts up
// (the broker's go-ahead gates stage 2): every command, and the worker
// itself, must be in it in each controller's hierarchy, and the limits
// there are the configured ones. The CPU quota is enforced: a busy loop is
// throttled. Control: this test process is in none of vak's cgroups.
func TestLandlockCommandsInSessionCgroup(t *testing.T) {
	if testenv.ExpectedLimits(t) != testenv.LimitsByCgroup {
		t.Skipf("sessions get no cgroup here (not root, %s is not delegated): TestRunLimitsMatchDoctor checks the rlimits doctor reports", testenv.EnvCgroup)
	}
	host, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatalf("no /proc/self/cgroup: %v", err)
	}
	if strings.Contains(string(host), "/vak-") {
		t.Fatalf("control: this test already runs in a vak cgroup:\n%s", host)
	}
	e := NewEnv(t, landlockBackend(t))
	e.Config.Sandbox.Limits = sandbox.Limits{Pids: 64, Memory: 96 << 20, CPUs: 0.2}
	s := e.Start(sandbox.WorkspaceWrite)
	var dirs map[string]string
	for i := 0; i < 20; i++ {
		r := Sh(t, s, "cat /proc/self/cgroup; echo; cat /proc/$PPID/cgroup")
		cmd, worker, _ := strings.Cut(r.Stdout, "\n\n")
		dirs = limitCgroups(t, cmd)
		if w := limitCgroups(t, worker); !maps.Equal(dirs, w) {
			t.Fatalf("command %d and its worker are in different cgroups: %q", i, r.Stdout)
		}
	}
	for file, want := range map[string]string{
		"pids/pids.max": "64", "memory/memory.limit_in_bytes": strconv.Itoa(96 << 20), "cpu/cpu.cfs_quota_us": "20000",
		"unified/pids.max": "64", "unified/memory.max": strconv.Itoa(96 << 20), "unified/cpu.max": "20000 100000",
	} {
		ctl, name := filepath.Split(file)
		dir, ok := dirs[strings.TrimSuffix(ctl, "/")]
		if !ok {
			continue
		}
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("%s/%s = %q (%v), want %s", dir, name, got, err, want)
		}
	}
	// The session's cgroup belongs to the user the sandbox runs as (it
	// created it), but the sandbox cannot reach cgroupfs to lift its
	// limits or leave: the attempts fail, while the same writes from this
	// test process outside succeed (control: the files are real and
	// writable by this user).
	for _, c := range []string{"pids", "unified"} {
		dir, ok := dirs[c]
		if !ok {
			continue
		}
		r := Sh(t, s, fmt.Sprintf("echo max > %[1]s/pids.max && echo RAISED; echo $$ > %[2]s/cgroup.procs && echo LEFT; cat %[1]s/pids.max", dir, filepath.Dir(dir)))
		if strings.Contains(r.Stdout, "RAISED") || strings.Contains(r.Stdout, "LEFT") || strings.Contains(r.Stdout, "64") {
			t.Errorf("the sandbox reached its cgroup %s: %q %q", dir, r.Stdout, r.Stderr)
		}
		if !strings.Contains(r.Stderr, dir+"/pids.max") || !strings.Contains(r.Stderr, filepath.Dir(dir)+"/cgroup.procs") {
			t.Errorf("the shell did not report both failed writes (to %s): %q", dir, r.Stderr)
		}
		t.Logf("attempts from the sandbox: %s", r.Stderr)
		if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte("64"), 0o600); err != nil {
			t.Errorf("control: this test cannot write %s/pids.max either: %v", dir, err)
		}
	}
	// The kernel enforces the quota on the session: a busy loop there
	// counts enforcement periods (nr_periods; whether it is throttled too
	// depends on the load of the machine, so it is only logged).
	stat := filepath.Join(dirs["cpu"], "cpu.stat")
	if dirs["unified"] != "" {
		stat = filepath.Join(dirs["unified"], "cpu.stat")
	}
	periods, throttled := cpuStat(t, stat)
	Sh(t, s, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	if p, th := cpuStat(t, stat); p <= periods {
		t.Errorf("a busy loop under a quota of 0.2 CPUs counted no enforcement period: nr_periods %d, then %d", periods, p)
	} else {
		t.Logf("nr_periods %d -> %d, nr_throttled %d -> %d", periods, p, throttled, th)
	}
}

// limitCgroups maps each limit's controller (pids, memory, cpu; "unified"
// on cgroup v2) in a /proc/PID/cgroup text to its directory, failing t
// unless each is a vak session cgroup.
func limitCgroups(t *testing.T, text string) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "pids" || c == "memory" || c == "cpu" {
				dirs[c] = filepath.Join("/sys/fs/cgroup", c, f[2])
			}
		}
		if f[0] == "0" && f[1] == "" && len(dirs) == 0 {
			dirs["unified"] = filepath.Join("/sys/fs/cgroup", f[2])
		}
	}
	if _, v1 := dirs["pids"]; v1 {
		delete(dirs, "unified")
	}
	if len(dirs) == 0 {
		t.Fatalf("no pids, memory, cpu or unified line in %q", text)
	}
	for c, d := range dirs {
		if !strings.HasPrefix(filepath.Base(d), "vak-") {
			t.Fatalf("the %s cgroup %s is not a session's (%q)", c, d, text)
		}
	}
	return dirs
}

// cpuStat is nr_periods and nr_throttled of a cpu.stat file.
func cpuStat(t *testing.T, file string) (periods, throttled int) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && (k == "nr_periods" || k == "nr_throttled") {
			if got[k], err = strconv.Atoi(v); err != nil {
				t.Fatalf("%s: %q", file, l)
			}
		}
	}
	if len(got) != 2 {
		t.Fatalf("%s lacks nr_periods or nr_throttled:\n%s", file, data)
	}
	return got["nr_periods"], got["nr_throttled"]
}

// The worker's capability bounding set is emptied on the one thread that
// forks commands (the hardening suite checks 200 commands); every other
// thread of the worker must still hold nothing it could use: empty
// inheritable, permitted, effective and ambient sets, no_new_privs and the
// seccomp filter. Control: stage 1 (PID 1, root of the outer namespace)
// holds capabilities in the same listing, so the check can fail.
func TestLandlockWorkerThreadsHoldNothing(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	s := e.Start(sandbox.WorkspaceWrite)
	r := Sh(t, s, `for p in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
  case "$c" in *__worker*) for t in $p/task/*; do echo "== ${p#/proc/} ${t##*/} $c"; cat $t/status; done;; esac
done`)
	type thread struct {
		stage2 bool
		status map[string]string
	}
	var threads []thread
	for _, block := range strings.Split(r.Stdout, "== ")[1:] {
		head, body, _ := strings.Cut(block, "\n")
		threads = append(threads, thread{strings.Contains(head, "--stage 2"), procStatus(body)})
	}
	var stage1, stage2 int
	for _, th := range threads {
		if !th.stage2 {
			if th.status["CapEff"] != "0000000000000000" {
				stage1++
			}
			continue
		}
		stage2++
		for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
			if th.status[f] != "0000000000000000" {
				t.Errorf("a worker thread holds %s=%s", f, th.status[f])
			}
		}
		if th.status["NoNewPrivs"] != "1" || th.status["Seccomp"] != "2" {
			t.Errorf("a worker thread lacks no_new_privs or the seccomp filter: NoNewPrivs=%s Seccomp=%s", th.status["NoNewPrivs"], th.status["Seccomp"])
		}
	}
	if stage1 == 0 {
		t.Fatalf("control: no stage 1 thread with capabilities in the listing:\n%s", truncate(r.Stdout))
	}
	if stage2 < 2 {
		t.Fatalf("found %d worker threads, want the Go runtime's several:\n%s", stage2, truncate(r.Stdout))
	}
}

// A background job outlives the command that started it and plants after
// the command's own check (.vak/config.toml, .mise.toml, a .git link to a
// directory outside the workspace). A long-lived session's workspace
// watcher (the broker's, against the workspace before the sandbox ran
// anything) removes each plant while the session runs, before the next
// command, and reports it (broker.Options.Planted); the link goes as the
// link, and the directory it points to keeps its file. When the session
// ends, the sweep at Close removes what the job planted again in its last
// moments. What existed before the session stays (the user's .envrc), and
// so does what the job writes besides the plants (the positive control:
// the job ran, and its own log says each plant was made).
func TestLandlockWatcherRemovesBackgroundPlants(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	own := filepath.Join(e.Workspace, ".envrc")
	if err := os.WriteFile(own, []byte("export OWN=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(e.Outside, "control")
	if err := os.WriteFile(control, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	e.Planted = func(res *wire.BashResult) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range res.ProtectedRemoved {
			seen[p] = true
		}
	}
	s := e.Start(sandbox.WorkspaceWrite)
	r := Sh(t, s, `(sleep 0.5; mkdir -p .vak; echo "vak=$?" >> bg.log; echo 'version = 1' > .vak/config.toml; echo x > .mise.toml; echo "mise=$?" >> bg.log; mkdir -p sub && ln -s `+e.Outside+` sub/.git; echo "link=$?" >> bg.log; echo done > bg-done; while :; do echo x > .mise.toml; sleep 0.05; done) >/dev/null 2>&1 & echo started`)
	if !strings.Contains(r.Stdout, "started") {
		t.Fatalf("background job not started: %+v", r)
	}
	gone := func(rel string) bool {
		_, err := os.Lstat(filepath.Join(e.Workspace, rel))
		return err != nil
	}
	waitFor(t, "the background job's own file", func() bool { return !gone("bg-done") })
	for _, rel := range []string{".vak", "sub/.git"} {
		waitFor(t, rel+" to be removed while the session runs", func() bool { return gone(rel) })
	}
	if b, _ := os.ReadFile(filepath.Join(e.Workspace, "bg.log")); string(b) != "vak=0\nmise=0\nlink=0\n" {
		t.Fatalf("control: the background job did not plant everything: %q", b)
	}
	waitFor(t, "the watcher's reports", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen[".vak"] && seen["sub/.git"] && seen[".mise.toml"]
	})
	if r := Sh(t, s, "cat bg-done; test -e sub/.git || echo no-link"); !strings.Contains(r.Stdout, "done") || !strings.Contains(r.Stdout, "no-link") {
		t.Errorf("the second command: %+v", r)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !gone(".mise.toml") {
		t.Errorf(".mise.toml, planted again and again by the background job, survived the session's end")
	}
	if data, err := os.ReadFile(own); err != nil || string(data) != "export OWN=1\n" {
		t.Errorf("the user's own .envrc did not survive: %q %v", data, err)
	}
	if data, err := os.ReadFile(control); err != nil || string(data) != "keep\n" {
		t.Errorf("the directory the .git link pointed to lost its file: %q %v", data, err)
	}
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A one-command session (vak run) leaves the command's check to the sweep
// at Close, made after every process of the sandbox is gone: the worker
// reports nothing of its own, the sweep removes and reports what the
// command planted (a nested .git, .vak/config.toml). Control: the same
// command in an ordinary session has the worker's check (or the session's
// workspace watcher, in the same result) report both.
func TestLandlockOneCommandSweepIsTheCheck(t *testing.T) {
	plant := `mkdir -p sub/.git .vak && echo x > sub/.git/config && echo 'version = 1' > .vak/config.toml`
	for _, one := range []bool{false, true} {
		e := NewEnv(t, landlockBackend(t))
		e.OneCommand = one
		s := e.Start(sandbox.WorkspaceWrite)
		r := Sh(t, s, plant)
		if r.ExitCode != 0 && one {
			// (An ordinary session's workspace watcher may remove sub/.git
			// while the command still writes into it.)
			t.Fatalf("plant: %+v", r)
		}
		if worker := len(r.ProtectedRemoved) > 0; worker == one {
			t.Errorf("one command %v: the worker's own check reported %q", one, r.ProtectedRemoved)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"sub/.git", ".vak"} {
			if _, err := os.Lstat(filepath.Join(e.Workspace, p)); err == nil {
				t.Errorf("one command %v: %s survived", one, p)
			}
		}
		if sw := s.Swept(); one && (sw == nil || !contains(sw.ProtectedRemoved, "sub/.git") || !slices.ContainsFunc(sw.ProtectedRemoved, func(p string) bool { return strings.HasPrefix(p, ".vak") })) {
			t.Errorf("the sweep did not report the plants: %+v", sw)
		}
	}
}

// In a one-command session (vak run) the sweep at Close finds setuid and
// setgid files by the events of the watch its baseline put on every
// directory, not by a walk that stats every file: a command cannot set
// either bit through a mode change (seccomp), but it can create a file
// with one (open, openat, openat2, mknodat), in the workspace or in a
// directory it makes, and rename such a file into place (a second hard
// link to one makes the watch walk again: fsguard's tests). Each is
// cleared and reported; that the sweep reports each is the control that
// the bit was there.
func TestLandlockOneCommandSweepSetuidByEvents(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	e.OneCommand = true
	s := e.Start(sandbox.WorkspaceWrite)
	attempts := []string{"setuid-openat-creat", "setgid-openat-creat", "setuid-openat2-creat", "setuid-mknodat"}
	var script strings.Builder
	want := map[string]bool{}
	for _, a := range attempts {
		fmt.Fprintf(&script, "./probe attempt %s\n", a)
		fmt.Fprintf(&script, "mkdir -p new/%s && (cd new/%s && ../../probe attempt %s)\n", a, a, a)
		want[a], want["new/"+a+"/"+a] = true, true
	}
	script.WriteString("mkdir -p made/deep && (cd made/deep && ../../probe attempt setuid-openat-creat) && mv made moved\n")
	want["moved/deep/setuid-openat-creat"] = true
	r := Sh(t, s, script.String())
	if n := strings.Count(r.Stdout, " succeeded"); n != 2*len(attempts)+1 {
		t.Fatalf("control: %d of the attempts made their file: %+v", n, r)
	}
	if len(r.SetuidCleared) > 0 {
		t.Errorf("the worker made a check of its own: %q", r.SetuidCleared)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sw := s.Swept()
	if sw == nil {
		t.Fatal("no sweep at Close")
	}
	for f := range want {
		fi, err := os.Lstat(filepath.Join(e.Workspace, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s is %v after the session", f, fi.Mode())
		}
		if !slices.ContainsFunc(sw.SetuidCleared, func(s string) bool { return strings.HasPrefix(s, f+" ") }) {
			t.Errorf("the sweep did not report %s: %q", f, sw.SetuidCleared)
		}
	}
}

// A landlock session's worker keeps the tripwire's walk current with
// inotify from its second command on, inside the view (its /proc, the
// pinned .git mounts): what later commands plant, in directories made in
// one go, moved in from the sandbox's /tmp or renamed, is still removed
// and reported, in a workspace of a thousand files (by the worker's check
// or by the session's workspace watcher, which may be first: the result
// holds both). The directories around each plant survive: the commands
// did run.
func TestLandlockTripwireWatch(t *testing.T) {
	e := NewEnv(t, landlockBackend(t))
	for i := range 1000 {
		dir := filepath.Join(e.Workspace, "vendor", fmt.Sprint(i/100), fmt.Sprint(i/10))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(e.Workspace, "repo", ".git", "objects"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := e.Start(sandbox.WorkspaceWrite)
	for _, tc := range []struct{ cmd, removed, kept string }{
		{"true", "", ""},
		{"mkdir -p vendor/3/31/x/.git && echo x > vendor/3/31/x/.git/config", "vendor/3/31/x/.git", "vendor/3/31/x"},
		{"mkdir -p /tmp/m/n/.git && mv /tmp/m vendor/m", "vendor/m/n/.git", "vendor/m/n"},
		{"mkdir -p vendor/p/objects && mv vendor/p vendor/5/.git", "vendor/5/.git", "vendor/5/50"},
		{"mkdir -p d/e && mv d vendor/d && echo 'gitdir: /x' > vendor/d/e/.GIT", "vendor/d/e/.GIT", "vendor/d/e"},
		{"ln -s " + e.Home + " vendor/7/.git", "vendor/7/.git", "vendor/7/70"},
	} {
		r := Sh(t, s, tc.cmd)
		if tc.removed == "" {
			if r.ExitCode != 0 {
				t.Fatalf("%q: %+v", tc.cmd, r)
			}
			continue
		}
		if r.ExitCode != 0 {
			// The session's workspace watcher may remove a .git while
			// the command still writes into it.
			t.Logf("%q: exit %d: %s", tc.cmd, r.ExitCode, r.Stderr)
		}
		if !contains(r.ProtectedRemoved, tc.removed) {
			t.Errorf("%q: removed %q, want %s", tc.cmd, r.ProtectedRemoved, tc.removed)
		}
		if _, err := os.Lstat(filepath.Join(e.Workspace, tc.removed)); err == nil {
			t.Errorf("%q: %s survived", tc.cmd, tc.removed)
		}
		if _, err := os.Lstat(filepath.Join(e.Workspace, tc.kept)); err != nil {
			t.Errorf("%q: %s is gone too: %v", tc.cmd, tc.kept, err)
		}
	}
}
