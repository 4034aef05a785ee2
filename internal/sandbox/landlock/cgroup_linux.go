package landlock

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"vak/internal/sandbox"
)

// A session's limits come from a cgroup of its own wherever one can be
// made: always as root (the kernel exempts the global root user from
// RLIMIT_NPROC, so root needs a pids cgroup), and for any user whose own
// cgroup is delegated to them (the kernel's cgroup-v2 "Delegation" model:
// the directory and its cgroup.procs writable by the user, as systemd's
// Delegate=yes or an administrator's chown make it; on v1 the same per
// hierarchy). Elsewhere the limits are rlimits only, and vak doctor says
// exactly which (DescribeLimits). Both cgroup v2 (unified) and v1 (one
// hierarchy per controller) are supported.

// cgroupPrefix names session cgroups: prefix + broker pid + "-" + random.
const cgroupPrefix = "vak-"

// brokerLeafSuffix names, after cgroupPrefix and the broker's pid, the v2
// leaf a broker moves itself into so that its delegated cgroup may enable
// controllers for its children (cgroup v2's no-internal-process rule).
const brokerLeafSuffix = "-broker"

// cgroupRoot is where cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// cgroupControllers are the controllers a session's cgroup uses: the
// process limit, the total memory and the CPU quota.
var cgroupControllers = []string{"pids", "memory", "cpu"}

// cpuPeriod is the CPU quota's period in microseconds (the kernel's
// default): a quota of CPUs×cpuPeriod per period.
const cpuPeriod = 100000

// Cgroup is a per-session cgroup (possibly one directory per v1 hierarchy).
type Cgroup struct {
	dirs []string
}

// NeedCgroup reports whether limits must come from a cgroup: only root is
// exempt from RLIMIT_NPROC.
func NeedCgroup() bool { return os.Geteuid() == 0 }

// cgroupPlan is where a session's cgroups go here, decided by
// probeCgroups without changing anything.
type cgroupPlan struct {
	v2 bool
	// parent is, per controller, the directory the session's cgroup is
	// created in; a controller without one is not enforced by a cgroup,
	// for the reason in why.
	parent map[string]string
	why    map[string]string
	// moveSelf (v2): the delegated cgroup holds this process, which first
	// moves into a leaf of its own (vak-PID-broker) so that the cgroup can
	// enable the controllers for its children.
	moveSelf bool
}

// has reports whether a cgroup enforces controller c.
func (p cgroupPlan) has(c string) bool { return p.parent[c] != "" }

// any reports whether a session gets a cgroup at all.
func (p cgroupPlan) any() bool { return len(p.parent) > 0 }

// version is "v1" or "v2", for messages.
func (p cgroupPlan) version() string {
	if p.v2 {
		return "v2"
	}
	return "v1"
}

// noCgroup is a plan without a cgroup for any controller, for one reason.
func noCgroup(why string) cgroupPlan {
	p := cgroupPlan{why: map[string]string{}}
	for _, c := range cgroupControllers {
		p.why[c] = why
	}
	return p
}

// probeCgroups decides where this process's sessions get their cgroups:
// its own cgroup in each hierarchy, if writable (delegated). Nothing is
// created; creating the session's cgroup is the real test.
func probeCgroups() cgroupPlan {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return noCgroup(err.Error())
	}
	own := parseProcCgroup(string(data))
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		path, ok := own[""]
		if !ok {
			return noCgroup("no cgroup v2 line in /proc/self/cgroup")
		}
		return planV2(cgroupRoot, path, os.Getpid())
	}
	return planV1(cgroupRoot, own)
}

// parseProcCgroup maps each controller of /proc/self/cgroup's lines to the
// process's cgroup path in its hierarchy ("" for the unified hierarchy).
func parseProcCgroup(text string) map[string]string {
	own := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			own[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	return own
}

// planV1: each controller's own cgroup, if this user may create children
// in it. (v1 has no rule against processes in inner cgroups, and a user may
// move their own processes into a cgroup whose cgroup.procs they can write:
// the one they create.)
func planV1(root string, own map[string]string) cgroupPlan {
	p := cgroupPlan{parent: map[string]string{}, why: map[string]string{}}
	for _, c := range cgroupControllers {
		path, ok := own[c]
		if !ok {
			p.why[c] = "no cgroup v1 " + c + " hierarchy for this process"
			continue
		}
		dir := filepath.Join(root, c, path)
		if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
			p.why[c] = fmt.Sprintf("your cgroup %s is not delegated to you (not writable: %v)", dir, err)
			continue
		}
		p.parent[c] = dir
	}
	return p
}

// planV2: the own cgroup (or, once this process moved into its broker
// leaf, the leaf's parent), if it is delegated: writable directory,
// cgroup.procs and cgroup.subtree_control. The controllers must be
// available to it (enabled by its parent). A cgroup can enable them for
// its children only while it holds no process itself, so it may hold no
// process but this one, which then moves into a leaf of its own.
func planV2(root, path string, pid int) cgroupPlan {
	dir := filepath.Join(root, path)
	if filepath.Base(dir) == brokerLeaf(pid) {
		dir = filepath.Dir(dir)
	}
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control"} {
		if err := unix.Access(filepath.Join(dir, f), unix.W_OK); err != nil {
			return noCgroup(fmt.Sprintf("your cgroup %s is not delegated to you (%s not writable: %v)", dir, filepath.Join(dir, f), err))
		}
	}
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return noCgroup(err.Error())
	}
	enabled, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return noCgroup(err.Error())
	}
	p := cgroupPlan{v2: true, parent: map[string]string{}, why: map[string]string{}}
	enable := false
	for _, c := range cgroupControllers {
		if !slices.Contains(strings.Fields(string(avail)), c) {
			p.why[c] = fmt.Sprintf("the %s controller is not available in your cgroup %s (its parent does not enable it)", c, dir)
			continue
		}
		p.parent[c] = dir
		enable = enable || !slices.Contains(strings.Fields(string(enabled)), c)
	}
	if !enable || dir == filepath.Clean(root) { // the root cgroup may hold processes
		return p
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return noCgroup(err.Error())
	}
	for _, f := range strings.Fields(string(procs)) {
		if f != strconv.Itoa(pid) {
			return noCgroup(fmt.Sprintf("your cgroup %s holds other processes than vak (pid %s): cgroup v2 enables controllers only for the children of a cgroup without processes; start vak alone in a delegated cgroup (systemd-run --user --scope -p Delegate=yes vak ...)", dir, f))
		}
		p.moveSelf = true
	}
	return p
}

// brokerLeaf is the name of the v2 leaf the broker pid moves into.
func brokerLeaf(pid int) string { return cgroupPrefix + strconv.Itoa(pid) + brokerLeafSuffix }

// setting is one interface file of a session's cgroup and its value;
// optional files (swap limits) are written only where they exist.
type setting struct {
	file, value string
	optional    bool
	// underAncestor: EINVAL means an ancestor's limit is lower (cgroup v1
	// refuses a CPU quota above its parent's); that lower one applies.
	underAncestor bool
}

// cgroupSettings are the files that set l for controller c, in the order
// they must be written (v1's memory+swap limit may not be below the memory
// limit). Swap is bounded to nothing beyond the memory limit, so the total
// is the total.
func cgroupSettings(v2 bool, c string, l sandbox.Limits) []setting {
	mem := strconv.FormatInt(l.Memory, 10)
	quota := strconv.FormatInt(max(int64(l.CPUs*cpuPeriod), 1000), 10)
	switch {
	case c == "pids":
		return []setting{{file: "pids.max", value: strconv.Itoa(l.Pids)}}
	case c == "memory" && v2:
		return []setting{{file: "memory.max", value: mem}, {file: "memory.swap.max", value: "0", optional: true}}
	case c == "memory":
		return []setting{{file: "memory.limit_in_bytes", value: mem}, {file: "memory.memsw.limit_in_bytes", value: mem, optional: true}}
	case c == "cpu" && v2:
		return []setting{{file: "cpu.max", value: quota + " " + strconv.Itoa(cpuPeriod)}}
	case c == "cpu":
		return []setting{{file: "cpu.cfs_period_us", value: strconv.Itoa(cpuPeriod)}, {file: "cpu.cfs_quota_us", value: quota, underAncestor: true}}
	}
	return nil
}

// cpuBinds reports whether a CPU quota of l.CPUs bounds anything: not when
// vak may run on no more CPUs than that anyway. Then the session gets no
// cpu cgroup, which would only cost its start (a third cgroup to join, and
// its processes scheduled as one group).
func cpuBinds(l sandbox.Limits) bool { return l.CPUs < float64(runtime.NumCPU()) }

// sessionControllers are the controllers of plan a session with limits l
// uses.
func sessionControllers(plan cgroupPlan, l sandbox.Limits) []string {
	var ctls []string
	for _, c := range cgroupControllers {
		if plan.has(c) && (c != "cpu" || cpuBinds(l)) {
			ctls = append(ctls, c)
		}
	}
	return ctls
}

// newCgroup creates the session's cgroup where plan says, bounding the
// tasks, the memory and the CPU time of everything placed in it.
func newCgroup(plan cgroupPlan, l sandbox.Limits) (*Cgroup, error) {
	l = l.WithDefaults()
	var b [6]byte
	rand.Read(b[:])
	name := cgroupPrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	c := &Cgroup{}
	var err error
	if plan.v2 {
		err = c.makeV2(plan, name, l)
	} else {
		for _, ctl := range sessionControllers(plan, l) {
			if err == nil {
				err = c.mk(filepath.Join(plan.parent[ctl], name), cgroupSettings(false, ctl, l))
			}
		}
	}
	if err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// makeV2 creates the session's cgroup below the delegated cgroup, first
// moving this process into its leaf and enabling the controllers there if
// the plan says so.
func (c *Cgroup) makeV2(plan cgroupPlan, name string, l sandbox.Limits) error {
	ctls := sessionControllers(plan, l)
	if len(ctls) == 0 {
		return nil
	}
	var enable []string
	for _, ctl := range ctls {
		enable = append(enable, "+"+ctl)
	}
	dir := plan.parent[ctls[0]] // on v2 the same for all
	if plan.moveSelf {
		leaf := filepath.Join(dir, brokerLeaf(os.Getpid()))
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup: %w", err)
		}
		if err := writeCgroupFile(leaf, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
			return fmt.Errorf("cgroup: move vak into %s: %w", leaf, err)
		}
	}
	if err := writeCgroupFile(dir, "cgroup.subtree_control", strings.Join(enable, " ")); err != nil {
		return fmt.Errorf("cgroup: enable %s: %w", strings.Join(ctls, ", "), err)
	}
	var settings []setting
	for _, ctl := range ctls {
		settings = append(settings, cgroupSettings(true, ctl, l)...)
	}
	return c.mk(filepath.Join(dir, name), settings)
}

// mk creates dir (one of the session's cgroups) and writes its settings.
func (c *Cgroup) mk(dir string, settings []setting) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	c.dirs = append(c.dirs, dir)
	for _, s := range settings {
		if _, err := os.Stat(filepath.Join(dir, s.file)); s.optional && errors.Is(err, os.ErrNotExist) {
			continue
		}
		err := writeCgroupFile(dir, s.file, s.value)
		if err != nil && !(s.underAncestor && errors.Is(err, unix.EINVAL)) {
			return fmt.Errorf("cgroup: set %s to %s: %w", s.file, s.value, err)
		}
	}
	return nil
}

// writeCgroupFile writes one value to an interface file of dir.
func writeCgroupFile(dir, file, value string) error {
	return os.WriteFile(filepath.Join(dir, file), []byte(value), 0o600)
}

// Add moves pid (and its future children) into the cgroup.
func (c *Cgroup) Add(pid int) error {
	for _, d := range c.dirs {
		if err := writeCgroupFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: add %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

// Dirs are the session's cgroup directories (one per v1 hierarchy).
func (c *Cgroup) Dirs() []string { return slices.Clone(c.dirs) }

// Remove deletes the cgroup. Call it after the worker exited; the kernel
// may still be reaping the sandbox's last processes, so it retries briefly.
func (c *Cgroup) Remove() {
	for i := len(c.dirs) - 1; i >= 0; i-- {
		for try := 0; try < 100; try++ {
			err := os.Remove(c.dirs[i])
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// CleanStaleCgroups removes session cgroups (and v2 broker leaves) whose
// broker is gone (alive reports whether a pid exists), next to this
// process's own cgroups. Only empty cgroups can be removed; the kernel
// refuses the others.
func CleanStaleCgroups(alive func(int) bool) []string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	own := parseProcCgroup(string(data))
	var parents []string
	if path, ok := own[""]; ok {
		dir := filepath.Join(cgroupRoot, path)
		if filepath.Base(dir) == brokerLeaf(os.Getpid()) {
			dir = filepath.Dir(dir)
		}
		parents = append(parents, dir)
	}
	for _, c := range cgroupControllers {
		if path, ok := own[c]; ok {
			parents = append(parents, filepath.Join(cgroupRoot, c, path))
		}
	}
	var removed []string
	for _, parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
			pidStr, _, ok2 := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidStr)
			if !e.IsDir() || !ok || !ok2 || err != nil || alive(pid) {
				continue
			}
			p := filepath.Join(parent, e.Name())
			if os.Remove(p) == nil {
				removed = append(removed, p)
			}
		}
	}
	return removed
}
