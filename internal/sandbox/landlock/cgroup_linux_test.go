package landlock

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"vak/internal/sandbox"
)

func TestParseProcCgroup(t *testing.T) {
	own := parseProcCgroup("9:name=systemd:/\n8:pids:/a\n2:cpu,cpuacct:/b\n4:memory:/c/d\n0::/e\n")
	for c, want := range map[string]string{"pids": "/a", "cpu": "/b", "cpuacct": "/b", "memory": "/c/d", "": "/e", "name=systemd": "/"} {
		if own[c] != want {
			t.Errorf("%q: got %q, want %q (%v)", c, own[c], want, own)
		}
	}
}

// fakeV2 makes a directory that looks like a cgroup v2 cgroup: its
// controllers, the ones it enables for its children and its processes.
func fakeV2(t *testing.T, dir, controllers, subtree, procs string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"cgroup.controllers": controllers, "cgroup.subtree_control": subtree, "cgroup.procs": procs} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Cgroup v2 cannot be exercised on this project's test machines (their
// controllers are bound to v1 hierarchies), so the decision and the files
// written are checked against directories laid out like cgroupfs: the
// delegated cgroup is used when the controllers are available to it, and
// it holds no process but vak's own (which moves into its leaf first) or
// already enables them; a cgroup shared with other processes, or whose
// parent does not enable a controller, is not (for that controller).
func TestPlanV2(t *testing.T) {
	const me = 4242
	for _, tc := range []struct {
		name                 string
		path                 string // own cgroup, below the fake root
		controllers, subtree string
		procs                string
		want                 []string // controllers with a cgroup
		moveSelf             bool
		whyContains          string
	}{
		{name: "delegated, vak alone: moves itself into its leaf", path: "/user/app.scope", controllers: "cpuset cpu io memory pids", procs: "4242\n", want: []string{"pids", "memory", "cpu"}, moveSelf: true},
		{name: "already enabled (vak in its leaf)", path: "/user/app.scope/vak-4242-broker", controllers: "cpu memory pids", subtree: "cpu memory pids", want: []string{"pids", "memory", "cpu"}},
		{name: "no cpu from the parent", path: "/user/app.scope", controllers: "memory pids", procs: "4242\n", want: []string{"pids", "memory"}, moveSelf: true, whyContains: "cpu controller is not available"},
		{name: "shared with a shell", path: "/user/app.scope", controllers: "cpu memory pids", procs: "100\n4242\n", whyContains: "holds other processes than vak (pid 100)"},
		{name: "root cgroup may hold processes", path: "/", controllers: "cpu memory pids", procs: "1\n2\n4242\n", want: []string{"pids", "memory", "cpu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, tc.path)
			if strings.HasSuffix(tc.path, "-broker") {
				dir = filepath.Dir(dir)
			}
			fakeV2(t, dir, tc.controllers, tc.subtree, tc.procs)
			p := planV2(root, tc.path, me)
			var got []string
			for _, c := range cgroupControllers {
				if p.has(c) {
					got = append(got, c)
					if p.parent[c] != dir {
						t.Errorf("%s in %s, want %s", c, p.parent[c], dir)
					}
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") || p.moveSelf != tc.moveSelf || p.any() && !p.v2 {
				t.Errorf("plan %+v: controllers %v (want %v), moveSelf %v (want %v)", p, got, tc.want, p.moveSelf, tc.moveSelf)
			}
			if tc.whyContains != "" && !strings.Contains(strings.Join(mapValues(p.why), "|"), tc.whyContains) {
				t.Errorf("why %v lacks %q", p.why, tc.whyContains)
			}
		})
	}
}

func mapValues(m map[string]string) []string {
	var v []string
	for _, s := range m {
		v = append(v, s)
	}
	return v
}

// On cgroup v2 the session's cgroup is created below the delegated one
// with every limit set, after vak moved itself into its leaf and enabled
// the controllers for the children (cgroupfs-like directories, see
// TestPlanV2). A CPU quota that cannot bind (no fewer CPUs than vak may
// use) is left out.
func TestNewCgroupV2Files(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name    string
		cpus    float64
		enabled string
		cpuMax  string // "" : no cpu.max
	}{
		{"half a CPU", 0.5, "+pids +memory +cpu", "50000 100000"},
		{"all CPUs", float64(runtime.NumCPU()), "+pids +memory", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "user", "app.scope")
			fakeV2(t, dir, "cpu memory pids", "", pid+"\n")
			plan := planV2(root, "/user/app.scope", os.Getpid())
			c, err := newCgroup(plan, sandbox.Limits{Memory: 96 << 20, Pids: 64, CPUs: tc.cpus})
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Dirs()) != 1 || filepath.Dir(c.Dirs()[0]) != dir || !strings.HasPrefix(filepath.Base(c.Dirs()[0]), "vak-"+pid+"-") {
				t.Fatalf("session cgroups %v, want one vak-%s-* in %s", c.Dirs(), pid, dir)
			}
			session := c.Dirs()[0]
			for file, want := range map[string]string{
				filepath.Join(dir, brokerLeaf(os.Getpid()), "cgroup.procs"): pid,
				filepath.Join(dir, "cgroup.subtree_control"):                tc.enabled,
				filepath.Join(session, "pids.max"):                          "64",
				filepath.Join(session, "memory.max"):                        strconv.Itoa(96 << 20),
				filepath.Join(session, "cpu.max"):                           tc.cpuMax,
			} {
				got, err := os.ReadFile(file)
				if want == "" && errors.Is(err, os.ErrNotExist) {
					continue
				}
				if err != nil || string(got) != want {
					t.Errorf("%s = %q (%v), want %q", file, got, err, want)
				}
			}
		})
	}
}

// On cgroup v1 each controller's own cgroup is used where this user may
// create children in it; elsewhere the reason names the directory.
func TestPlanV1(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"pids/a", "memory/b", "cpu"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := planV1(root, map[string]string{"pids": "/a", "memory": "/b"})
	if p.v2 || p.parent["pids"] != filepath.Join(root, "pids/a") || p.parent["memory"] != filepath.Join(root, "memory/b") || p.has("cpu") {
		t.Fatalf("plan %+v", p)
	}
	if !strings.Contains(p.why["cpu"], "no cgroup v1 cpu hierarchy") {
		t.Errorf("why cpu: %q", p.why["cpu"])
	}
	if os.Geteuid() != 0 {
		os.Chmod(filepath.Join(root, "memory/b"), 0o555)
		if p := planV1(root, map[string]string{"memory": "/b"}); p.has("memory") || !strings.Contains(p.why["memory"], "not delegated to you") {
			t.Errorf("a read-only cgroup: %+v", p)
		}
	}
}

// What doctor says about each limit, from what enforces it.
func TestDescribeLimits(t *testing.T) {
	l := sandbox.Limits{Memory: 96 << 20, Pids: 64, CPUs: 0.5, TmpfsSize: 16 << 20}
	delegated := cgroupPlan{parent: map[string]string{"pids": "/cg/pids/u", "memory": "/cg/memory/u", "cpu": "/cg/cpu/u"}, why: map[string]string{}}
	none := noCgroup("your cgroup /cg is not delegated to you")
	for _, tc := range []struct {
		name string
		f    limitsFacts
		want []string
	}{
		{"delegated v1", limitsFacts{plan: delegated, limits: l, userNS: true, nprocPerNS: true, cpus: 4}, []string{
			"memory 96 MiB in total (each session's own cgroup v1 in /cg/memory/u;",
			"pids 64 in total (each session's own cgroup v1 in /cg/pids/u)",
			"cpus 0.5 (CPU quota 50000 µs per 100000 µs; each session's own cgroup v1 in /cg/cpu/u)",
			"tmp 16 MiB for each of /tmp, /dev/shm and a fresh HOME",
		}},
		{"user without delegation", limitsFacts{plan: none, limits: l, userNS: true, nprocPerNS: true, cpus: 4}, []string{
			"memory 96 MiB per process (RLIMIT_DATA", "not delegated to you; the sandbox's total is NOT limited, see docs/filesystem.md#limits",
			"pids 64 in total (RLIMIT_NPROC, which the kernel counts per user namespace",
			"cpus 0.5 NOT enforced (no cpu cgroup: your cgroup /cg is not delegated to you",
		}},
		{"no more CPUs than the limit", limitsFacts{plan: delegated, limits: sandbox.Limits{Memory: 96 << 20, Pids: 64, CPUs: 2, TmpfsSize: 16 << 20}, userNS: true, nprocPerNS: true, cpus: 2}, []string{
			"cpus 2 (vak may use only 2 CPUs here: nothing to bound)",
		}},
		{"old kernel", limitsFacts{plan: none, limits: l, userNS: true}, []string{"pids 64 counted over all your processes (", "older than Linux 5.14"}},
		{"no namespaces", limitsFacts{plan: none, limits: l, nprocPerNS: true}, []string{"pids 64 counted over all your processes (", "no user namespace", "tmp 16 MiB NOT enforced"}},
		{"root without a pids cgroup (allow_weaker)", limitsFacts{plan: none, limits: l, root: true, userNS: true, nprocPerNS: true}, []string{"pids 64 NOT enforced (root is exempt from RLIMIT_NPROC"}},
	} {
		got := strings.Join(describeLimits(tc.f), "\n")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: lacks %q:\n%s", tc.name, w, got)
			}
		}
		if n := strings.Count(got, "\n") + 1; n != 4 {
			t.Errorf("%s: %d lines, want one per limit:\n%s", tc.name, n, got)
		}
	}
}

func TestReleaseAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
	}{
		{"5.14.0", true}, {"6.1.0-18-amd64", true}, {"5.13.19", false}, {"4.19.0", false}, {"5.15", true}, {"bogus", false}, {"6", false},
	} {
		if got := releaseAtLeast(tc.release, 5, 14); got != tc.want {
			t.Errorf("%q: %v", tc.release, got)
		}
	}
}
