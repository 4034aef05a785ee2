package landlock

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"vak/internal/sandbox"
)

var _ sandbox.LimitsDescriber = (*Backend)(nil)

// LimitsDoc is where the documentation explains the native sandbox's
// limits and how to get a delegated cgroup.
const LimitsDoc = "docs/filesystem.md#limits"

// DescribeLimits implements sandbox.LimitsDescriber: per limit, its value
// and what enforces it for this user on this kernel. A session starts with
// exactly these (sessionCgroup fails rather than run without the cgroup
// reported here).
func (b *Backend) DescribeLimits(l sandbox.Limits) []string {
	k := b.probe()
	return describeLimits(limitsFacts{
		plan: k.cg, limits: l.WithDefaults(), root: k.needCG, userNS: k.userNS,
		nprocPerNS: kernelAtLeast(5, 14), cpus: runtime.NumCPU(),
	})
}

// limitsFacts is what decides how the limits are enforced.
type limitsFacts struct {
	plan   cgroupPlan
	limits sandbox.Limits
	// root: the global root user, exempt from RLIMIT_NPROC.
	root bool
	// userNS: the sandbox runs in user namespaces of its own.
	userNS bool
	// nprocPerNS: the kernel counts RLIMIT_NPROC per user namespace
	// (Linux 5.14, "ucounts").
	nprocPerNS bool
	// cpus vak may run on (cpuBinds).
	cpus int
}

// describeLimits is DescribeLimits, purely from the facts.
func describeLimits(f limitsFacts) []string {
	tmp := "for each of /tmp, /dev/shm and a fresh HOME (tmpfs: their content is memory, counted in a memory cgroup but not in RLIMIT_DATA)"
	if !f.userNS {
		tmp = "NOT enforced (no namespaces: /tmp is a directory on the host's disk)"
	}
	return sandbox.LimitLines(f.limits, f.memory(), f.pids(), f.cpusLine(), tmp)
}

// in names the session cgroup that enforces controller c.
func (f limitsFacts) in(c string) string {
	return fmt.Sprintf("each session's own cgroup %s in %s", f.plan.version(), f.plan.parent[c])
}

func (f limitsFacts) memory() string {
	if f.plan.has("memory") {
		return fmt.Sprintf("in total (%s; each process also RLIMIT_DATA)", f.in("memory"))
	}
	return fmt.Sprintf("per process (RLIMIT_DATA: each process's heap and private mappings; no memory cgroup: %s; the sandbox's total is NOT limited, see %s)", f.plan.why["memory"], LimitsDoc)
}

func (f limitsFacts) pids() string {
	switch {
	case f.plan.has("pids"):
		return fmt.Sprintf("in total (%s)", f.in("pids"))
	case f.root:
		return fmt.Sprintf("NOT enforced (root is exempt from RLIMIT_NPROC and there is no pids cgroup: %s)", f.plan.why["pids"])
	case f.userNS && f.nprocPerNS:
		return "in total (RLIMIT_NPROC, which the kernel counts per user namespace: the sandbox's own processes and threads; yours outside it do not count)"
	}
	return fmt.Sprintf("counted over all your processes (RLIMIT_NPROC counts every process of yours, inside the sandbox or not, %s)", nprocWhy(f.userNS))
}

func (f limitsFacts) cpusLine() string {
	l := f.limits.WithDefaults()
	switch {
	case l.CPUs >= float64(f.cpus):
		return fmt.Sprintf("(vak may use only %d CPUs here: nothing to bound)", f.cpus)
	case f.plan.has("cpu"):
		return fmt.Sprintf("(CPU quota %d µs per %d µs; %s)", max(int64(l.CPUs*cpuPeriod), 1000), cpuPeriod, f.in("cpu"))
	}
	return fmt.Sprintf("NOT enforced (no cpu cgroup: %s; see %s)", f.plan.why["cpu"], LimitsDoc)
}

// nprocWhy says why RLIMIT_NPROC counts all of a user's processes.
func nprocWhy(userNS bool) string {
	if !userNS {
		return "as the sandbox has no user namespace"
	}
	return "as this kernel is older than Linux 5.14"
}

// kernelAtLeast reports whether the running kernel is at least major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), major, minor)
}

// releaseAtLeast compares a kernel release ("6.1.0-18-amd64") with
// major.minor; an unreadable release is not.
func releaseAtLeast(release string, major, minor int) bool {
	fields := strings.FieldsFunc(release, func(r rune) bool { return r < '0' || r > '9' })
	if len(fields) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(fields[0])
	mnr, err2 := strconv.Atoi(fields[1])
	return err1 == nil && err2 == nil && (maj > major || maj == major && mnr >= minor)
}
