package landlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	ll "github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"

	"vak/internal/sandbox"
)

// Backend is the Landlock process-scoped backend.
type Backend struct {
	// AllowWeaker accepts a kernel without user namespaces or Landlock.
	AllowWeaker bool

	once   sync.Once
	kernel kernelProbe
}

var _ sandbox.Backend = (*Backend)(nil)

// Name implements sandbox.Backend.
func (*Backend) Name() string { return string(sandbox.Landlock) }

// Scope implements sandbox.Backend.
func (*Backend) Scope() sandbox.Scope { return sandbox.ScopeProcess }

// Available implements sandbox.Backend: nil when the sandbox can run as
// designed, or weaker but explicitly allowed.
func (b *Backend) Available(context.Context) error {
	st := b.Status()
	if st.Problem != "" && !st.Weaker {
		return fmt.Errorf("%w: %s", ErrUnavailable, st.Problem)
	}
	return nil
}

// Status is the backend's verdict on this kernel (probed once).
func (b *Backend) Status() Status { return b.StatusFor(b.AllowWeaker) }

// StatusFor evaluates the cached kernel probe as if allowWeaker were set.
func (b *Backend) StatusFor(allowWeaker bool) Status {
	return b.probe().evaluate(allowWeaker)
}

// probe is what the kernel offers, probed once per backend.
func (b *Backend) probe() kernelProbe {
	b.once.Do(func() { b.kernel = probeKernel() })
	return b.kernel
}

// Probe reports what the kernel offers. With allowWeaker, missing pieces
// make the status Weaker instead of unavailable (except seccomp, which is
// always required).
func Probe(allowWeaker bool) Status { return probeKernel().evaluate(allowWeaker) }

// kernelProbe is what the kernel offers, read once per backend.
type kernelProbe struct {
	abi                     int
	seccomp, userNS, needCG bool
	// cg is where sessions get their cgroups (for every user: root must
	// have one, others use one where theirs is delegated).
	cg cgroupPlan
}

func probeKernel() kernelProbe {
	k := kernelProbe{seccomp: seccompSupported(), userNS: userNSWorks(), needCG: NeedCgroup(), cg: probeCgroups()}
	k.abi, _ = llsys.LandlockGetABIVersion()
	return k
}

func (k kernelProbe) evaluate(allowWeaker bool) Status {
	var cgErr error
	if k.needCG && !k.cg.has("pids") {
		cgErr = errors.New(k.cg.why["pids"])
	}
	st := evaluate(k.abi, k.seccomp, k.userNS, k.needCG, cgErr, allowWeaker)
	if k.cg.any() && st.Restricted != "" {
		st.Cgroup = k.cg.version()
		for _, c := range cgroupControllers {
			if k.cg.has(c) {
				st.CgroupControllers = append(st.CgroupControllers, c)
			}
		}
		st.Restricted = summary(st)
	}
	return st
}

// sessionCgroup creates a session's cgroup where the probe found one, or
// returns nil when there is none to make (a user without a delegated
// cgroup: the limits are rlimits, as DescribeLimits says). As root the
// process limit needs one: its absence is an error.
func (b *Backend) sessionCgroup(l sandbox.Limits) (*Cgroup, error) {
	k := b.probe()
	if !k.cg.has("pids") && k.needCG {
		return nil, fmt.Errorf("running as root, the process limit needs a pids cgroup: %s", k.cg.why["pids"])
	}
	if len(sessionControllers(k.cg, l.WithDefaults())) == 0 {
		return nil, nil
	}
	c, err := newCgroup(k.cg, l)
	if err != nil {
		return nil, fmt.Errorf("%w (vak doctor reports limits enforced by this cgroup)", err)
	}
	return c, nil
}

// evaluate decides, purely from what the kernel offers, whether the sandbox
// can run as designed, only weaker (and whether that is allowed), or not at
// all.
func evaluate(abi int, seccomp, userNS, needCgroup bool, cgroupErr error, allowWeaker bool) Status {
	st := Status{ABI: max(abi, 0), Seccomp: seccomp, UserNS: userNS}
	if !seccomp {
		st.Problem = "the kernel does not offer seccomp filters"
		return st
	}
	var problems []string
	if st.ABI < 1 {
		problems = append(problems, "the kernel does not offer Landlock (needs Linux 5.13+ with landlock in the lsm= list)")
	}
	if !userNS {
		problems = append(problems, "user namespaces are unavailable (kernel.unprivileged_userns_clone=0, user.max_user_namespaces=0 or an LSM forbids them)")
	}
	if needCgroup && cgroupErr != nil {
		problems = append(problems, "running as root, the process limit needs a writable pids cgroup: "+cgroupErr.Error())
	}
	if len(problems) > 0 {
		st.Problem = strings.Join(problems, "; ")
		// Weaker is acceptable only if at least one of the two filesystem
		// layers (Landlock or the namespace view) remains.
		st.Weaker = allowWeaker && (st.ABI >= 1 || userNS)
	}
	st.Restricted = summary(st)
	return st
}

func summary(st Status) string {
	var parts []string
	if st.ABI >= 1 {
		parts = append(parts, fmt.Sprintf("landlock abi %d", st.ABI))
	}
	parts = append(parts, "seccomp")
	if st.UserNS {
		parts = append(parts, "user+mount+pid+net+ipc+uts namespaces", "pivot_root view")
	}
	parts = append(parts, "no_new_privs", "rlimits")
	if st.Cgroup != "" {
		parts = append(parts, fmt.Sprintf("cgroup %s (%s)", st.Cgroup, strings.Join(st.CgroupControllers, ", ")))
	}
	return strings.Join(parts, ", ")
}

// seccompSupported: PR_GET_SECCOMP fails (EINVAL) only on kernels without
// seccomp; 0 means no filter yet, 2 that one is already installed (filters
// stack, so that is fine too).
func seccompSupported() bool {
	_, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	return err == nil
}

// userNSWorks reads the sysctls that forbid user namespaces. It is a cheap
// prediction; starting the worker is the real test, and a failure there is
// reported as unavailable too.
func userNSWorks() bool {
	for _, f := range []string{"/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // sysctl absent: nothing forbids it
		}
		if strings.TrimSpace(string(data)) == "0" && (os.Getuid() != 0 || strings.Contains(f, "max_user")) {
			return false
		}
	}
	return true
}

func nsAttr(uid, gid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
}

// Configure prepares cmd (a re-exec of vak's worker) to start stage 1 in
// fresh namespaces, given the kernel's status (Backend.StatusFor). It
// reports whether namespaces are used: false only when they are unavailable
// and the status accepts a weaker sandbox; the caller then starts stage 2
// directly.
func Configure(cmd *exec.Cmd, st Status) (namespaces bool, err error) {
	if st.Problem != "" && !st.Weaker {
		return false, fmt.Errorf("%w: %s", ErrUnavailable, st.Problem)
	}
	if !st.UserNS {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		return false, nil
	}
	cmd.SysProcAttr = nsAttr(os.Getuid(), os.Getgid())
	return true, nil
}

// Stage1 runs in the new namespaces as their root. It builds the view,
// starts stage 2 (argv, with spec on fd 3) in a nested user namespace as the
// invoking user, and then acts as init until stage 2 exits. It returns the
// exit status for the process; it only returns early with an error. fence
// serves a proxied network (Policy.Fence); nil refuses one.
func Stage1(p Policy, spec []byte, argv []string, fence FenceServer) (int, error) {
	// What stage 1 did, timed for vak run --trace (stage 2 reports it).
	phases := []sandbox.Phase{{Name: "stage 1 process start (exec, Go start-up)", End: processStart}}
	begin := func(name string) func() {
		start := time.Now()
		return func() { phases = append(phases, sandbox.Phase{Name: name, Start: start, End: time.Now()}) }
	}
	if os.Getpid() != 1 {
		return 0, errors.New("landlock stage 1 must be PID 1 of a new PID namespace")
	}
	// Descriptors vak's own invoker left open must not reach stage 2.
	if err := closeInherited(); err != nil {
		return 0, fmt.Errorf("landlock: %w", err)
	}
	if p.Fence != nil {
		// Before anything sandboxed runs, and for as long as stage 1 (the
		// namespace's init) lives.
		end := begin("stage 1 fence")
		stopFence, err := startFence(p.Fence, fence)
		end()
		if err != nil {
			return 0, err
		}
		defer stopFence()
	}
	end := begin("stage 1 view")
	if err := buildView(p); err != nil {
		return 0, fmt.Errorf("landlock: build filesystem view: %w", err)
	}
	end()
	if p.Fence != nil {
		// The forwarder and the relay reach the gateway through
		// /proc/self/fd of the view: without a /proc there, nothing could
		// get out; say so rather than run with every connection failing.
		if err := checkFenceFDs(p.Fence); err != nil {
			return 0, err
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command("/proc/self/exe", argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sup, supRemote, err := SupervisorPair()
	if err != nil {
		return 0, err
	}
	cmd.ExtraFiles = []*os.File{r, supRemote}
	cmd.Env = os.Environ()
	cmd.Dir = p.Workspace
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: p.UID, HostID: 0, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: p.GID, HostID: 0, Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
		// A non-root stage 2 loses its capabilities on execve; this one
		// survives as ambient so that it can empty its bounding set before
		// it drops everything (dropCapabilities).
		AmbientCaps: []uintptr{unix.CAP_SETPCAP},
	}
	if p.GoAhead {
		end := begin("stage 1 go-ahead (cgroup joined)")
		if err := awaitGoAhead(); err != nil {
			return 0, err
		}
		end()
	}
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// Stage 2 closes the last phase at its own start (stage2Phases).
	phases = append(phases, sandbox.Phase{Name: "stage 2 process start (exec, Go start-up)", Start: time.Now()})
	cmd.Env = append(cmd.Env, phasesEnv+"="+encodePhases(phases))
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("landlock: start stage 2: %w", err)
	}
	r.Close()
	supRemote.Close()
	// Stage 1 answers stage 2's setsid notifications (see notify_linux.go).
	go Supervise(sup, cmd.Process.Pid)
	if _, err := w.Write(spec); err != nil {
		return 0, fmt.Errorf("landlock: pass spec: %w", err)
	}
	w.Close()
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	// As init, reap every orphan until stage 2 itself exits.
	stage2 := cmd.Process.Pid
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 1, nil
		}
		if pid == stage2 {
			if ws.Signaled() {
				return 128 + int(ws.Signal()), nil
			}
			return ws.ExitStatus(), nil
		}
	}
}

// awaitGoAhead reads stage 1's go-ahead (Policy.GoAhead): one byte that
// the broker writes once this process is in the session's cgroup. End of
// file without it means the broker failed to place it there.
func awaitGoAhead() error {
	f := os.NewFile(GoAheadFD, "go-ahead")
	if f == nil {
		return fmt.Errorf("landlock: no go-ahead descriptor %d", GoAheadFD)
	}
	return readGoAhead(f)
}

// readGoAhead reads the go-ahead from f and closes it.
func readGoAhead(f *os.File) error {
	defer f.Close()
	var b [1]byte
	if n, err := f.Read(b[:]); n != 1 || b[0] != goAheadByte {
		return fmt.Errorf("landlock: the broker did not confirm the sandbox's cgroup (go-ahead on fd %d: %d bytes, %v); stage 2 not started", GoAheadFD, n, err)
	}
	return nil
}

// Stage2 restricts the calling process for good: capabilities, rlimits,
// no_new_privs, Landlock and seccomp, in that order. The outcome says what
// is in force (Description) and how the worker starts commands: on the
// two threads whose capability bounding set is empty (Serve and Spawn,
// see execThreads), and which sessions a command made (Sessions, answered
// by the setsid supervisor).
func Stage2(p Policy, namespaces bool) (sandbox.WorkerOutcome, error) {
	var out sandbox.WorkerOutcome
	st := Status{Seccomp: true, UserNS: namespaces}
	st.ABI, _ = llsys.LandlockGetABIVersion()
	if st.ABI < 1 && !p.AllowWeaker {
		return out, fmt.Errorf("%w: the kernel does not offer Landlock", ErrUnavailable)
	}
	th := newExecThreads()
	if err := dropCapabilities(th); err != nil {
		return out, fmt.Errorf("landlock: drop capabilities: %w", err)
	}
	if err := setRlimits(p.Limits.WithDefaults()); err != nil {
		return out, fmt.Errorf("landlock: rlimits: %w", err)
	}
	if err := llsys.AllThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return out, fmt.Errorf("landlock: no_new_privs: %w", err)
	}
	if st.ABI >= 1 {
		if err := restrictLandlock(p, namespaces); err != nil {
			return out, err
		}
	}
	listener, err := installSeccomp(p.Fence != nil)
	if err != nil {
		return out, fmt.Errorf("landlock: seccomp: %w", err)
	}
	lineage, err := handOver(listener)
	if err != nil {
		return out, fmt.Errorf("landlock: %w", err)
	}
	// Commands get only 0-2: whatever else this process inherited (from
	// stage 1, or from vak's invoker without namespaces) closes on exec.
	// Every descriptor Go opens later is close-on-exec already.
	if err := closeInherited(); err != nil {
		return out, fmt.Errorf("landlock: %w", err)
	}
	s := summary(st)
	if !namespaces {
		s += " (weaker: no namespaces; allowed by sandbox.allow_weaker)"
	}
	if st.ABI < 1 {
		s += " (weaker: no landlock; allowed by sandbox.allow_weaker)"
	}
	out.Description, out.Spawn, out.Serve, out.Sessions = s, th.spawn, th.serve, lineage.Sessions
	return out, nil
}

// restrictLandlock applies the filesystem, network and scope rules.
func restrictLandlock(p Policy, namespaces bool) error {
	var rules []ll.Rule
	sys := p.SystemPaths
	if sys == nil {
		sys = DefaultSystemPaths
	}
	rules = append(rules, ll.RODirs(existing(sys)...).IgnoreIfMissing())
	if namespaces {
		// Listing directories (not reading files) anywhere in the view: it
		// holds nothing but what was mounted into it.
		rules = append(rules, ll.PathAccess(llsys.AccessFSReadDir, "/"))
	}
	rules = append(rules, ll.RODirs("/proc").IgnoreIfMissing())
	rules = append(rules, ll.RODirs(existing(p.ReadPaths)...).IgnoreIfMissing())
	if p.Fence != nil && namespaces {
		rules = append(rules, ll.RODirs(sandbox.FenceTrustDir).IgnoreIfMissing())
	}
	rw := []string{p.TempDir}
	if p.AgentHome != "" {
		rw = append(rw, p.AgentHome)
	}
	if namespaces {
		// In the view /tmp is the private temp dir and HOME a private tmpfs.
		rw = []string{"/tmp", "/dev/shm"}
		if p.UserHome != "" && p.UserHome != "/" {
			rw = append(rw, p.UserHome)
		}
	}
	rw = append(rw, p.WritePaths...)
	if p.Mode == sandbox.WorkspaceWrite {
		rw = append(rw, p.Workspace)
	} else {
		rules = append(rules, ll.RODirs(p.Workspace))
	}
	rules = append(rules, ll.RWDirs(existing(rw)...).WithRefer().IgnoreIfMissing())
	var devs []string
	for _, d := range DevNodes {
		devs = append(devs, "/dev/"+d)
	}
	rules = append(rules, ll.RWFiles(existing(devs)...).WithIoctlDev().IgnoreIfMissing())
	rules = append(rules, ll.RODirs("/dev").IgnoreIfMissing())
	if namespaces {
		// The view's /dev/pts is a private devpts instance (no terminal of
		// the host is in it): the worker allocates interactive commands'
		// terminals there (/dev/ptmx links to pts/ptmx).
		rules = append(rules, ll.PathAccess(llsys.AccessFSReadFile|llsys.AccessFSWriteFile|llsys.AccessFSIoctlDev, "/dev/pts").IgnoreIfMissing())
	}
	cfg := ll.V11.BestEffort()
	// Scopes. Below ABI 8, go-landlock restricts each Go thread on its own,
	// so the worker's threads land in sibling domains; a signal scope would
	// then stop the worker from killing a command that another thread
	// forked. Signals stay contained by the PID namespace instead. Abstract
	// UNIX sockets are confined by the network namespace; without one
	// (weaker mode) the scope is the only barrier, so keep it there.
	cfg.Scoped = 0
	if p.Fence != nil {
		// Proxied: every TCP connection, whatever its port, is redirected
		// to the forwarder by the namespace's fence; Landlock's per-port
		// TCP rules would only break that.
		cfg.HandledAccessNet = 0
	}
	if !namespaces {
		cfg.Scoped = ll.ScopedSet(llsys.ScopeAbstractUnixSocket)
	}
	if err := cfg.Restrict(rules...); err != nil {
		return fmt.Errorf("landlock: restrict: %w", err)
	}
	return nil
}

func existing(ps []string) []string {
	var out []string
	for _, p := range ps {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// dropCapabilities clears the bounding, ambient, inheritable, permitted and
// effective sets and locks securebits so that even uid 0 inside the nested
// user namespace regains nothing on execve.
//
// Capabilities belong to threads, not processes, and the Go runtime runs
// this process on several threads already. Ambient, inheritable,
// permitted and effective sets, and the securebits, are changed on all
// threads at once through psx (one stop-the-world call each); threads
// started later are cloned from restricted ones. The bounding set takes one
// call per capability, which would be 41 such calls: it is emptied only on
// the two exec threads (execThreads), the only ones that fork commands (a
// child inherits the sets of the thread that created it). On the other threads
// it stays full and cannot be used: nothing is left in any of their other
// sets, no_new_privs is set and the securebits forbid regaining
// capabilities as root.
func dropCapabilities(th *execThreads) error {
	// Bounding set and securebits need CAP_SETPCAP. Stage 1 raises it as an
	// ambient capability of stage 2 (see Stage1), so that a stage 2 that is
	// not uid 0 in its namespace still holds it here and can empty the
	// bounding set; without namespaces (allow_weaker) a non-root worker has
	// none and nothing can give it capabilities back under no_new_privs.
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		for _, sp := range []*spawner{th.loop, th.other} {
			if err := sp.do(dropBoundingSet); err != nil {
				return err
			}
		}
		const secbits = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<6 | 1<<7 // NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE (+locks)
		if err := llsys.AllThreadsPrctl(unix.PR_SET_SECUREBITS, secbits, 0, 0, 0); err != nil {
			return fmt.Errorf("securebits: %w", err)
		}
	}
	if err := llsys.AllThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	data = [2]unix.CapUserData{}
	if _, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}

// dropBoundingSet empties the calling thread's bounding set (an exec thread's:
// see dropCapabilities). Capabilities the kernel does not know fail with
// EINVAL.
func dropBoundingSet() error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop bounding cap %d: %w", c, err)
		}
	}
	return nil
}

// spawner runs functions on one OS thread of its own: its goroutine locks
// the thread and never unlocks it, so no other goroutine ever runs there,
// and the Go runtime creates new threads from its template thread, never
// from a locked one. Whatever that thread forks inherits its capability
// sets.
type spawner struct {
	reqs chan func()
	tid  int // the thread's ID: gettid() returns it only on that goroutine
}

func newSpawner() *spawner {
	sp := &spawner{reqs: make(chan func())}
	tid := make(chan int)
	go func() {
		runtime.LockOSThread() // for good: the thread ends with the process
		tid <- unix.Gettid()
		for f := range sp.reqs {
			f()
		}
	}()
	sp.tid = <-tid
	return sp
}

// do runs f on the spawner's thread and returns its error.
func (sp *spawner) do(f func() error) error {
	done := make(chan error, 1)
	sp.reqs <- func() { done <- f() }
	return <-done
}

// execThreads are the worker's two threads whose capability bounding set
// Stage2 empties (the set is per thread, and a child inherits its creator
// thread's), the only ones that start commands:
//
//   - loop runs the worker's request loop (serve, sandbox.WorkerOutcome.Serve).
//     It reads a request, starts its command and is back at its next read
//     without handing anything to another thread: each hand-off wakes a
//     sleeping thread, the larger part of what a warm command costs over a
//     plain fork and exec.
//   - other starts the commands of every other goroutine (interactive
//     commands, and requests beyond those the loop starts itself), one at a
//     time, through do.
type execThreads struct{ loop, other *spawner }

func newExecThreads() *execThreads {
	return &execThreads{loop: newSpawner(), other: newSpawner()}
}

// spawn runs start (which forks a command) on an exec thread: right here
// when the caller is the request loop, else on the other one.
func (th *execThreads) spawn(start func() error) error {
	if unix.Gettid() == th.loop.tid {
		return start()
	}
	return th.other.do(start)
}

// serve runs the worker's request loop on the loop thread and returns when
// it does.
func (th *execThreads) serve(loop func()) {
	th.loop.do(func() error { loop(); return nil })
}

// closeInherited marks every descriptor above 2 close-on-exec
// (close_range with CLOSE_RANGE_CLOEXEC, Linux 5.11; /proc/self/fd and
// fcntl on older kernels).
func closeInherited() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if err != unix.ENOSYS && err != unix.EINVAL {
		return fmt.Errorf("close_range(3, ~0, CLOSE_RANGE_CLOEXEC): %w", err)
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list open descriptors: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("list open descriptors: %w", err)
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 3 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("mark descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

// setRlimits applies the configured limits to this process and everything it
// starts. RLIMIT_NPROC counts per user namespace, so it bounds the sandbox's
// processes only; RLIMIT_DATA bounds each process's heap (a per-process
// memory cap; the docker backend caps the total).
func setRlimits(l sandbox.Limits) error {
	set := func(res int, v uint64) error {
		return unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v})
	}
	if err := set(unix.RLIMIT_NPROC, uint64(l.Pids)); err != nil {
		return fmt.Errorf("RLIMIT_NPROC: %w", err)
	}
	if err := set(unix.RLIMIT_DATA, uint64(l.Memory)); err != nil {
		return fmt.Errorf("RLIMIT_DATA: %w", err)
	}
	if err := set(unix.RLIMIT_CORE, 0); err != nil {
		return fmt.Errorf("RLIMIT_CORE: %w", err)
	}
	return nil
}

// encodePhases is the value of phasesEnv.
func encodePhases(ps []sandbox.Phase) string {
	enc := make([]encodedPhase, 0, len(ps))
	for _, p := range ps {
		e := encodedPhase{Name: p.Name}
		if !p.Start.IsZero() {
			e.Start = p.Start.UnixNano()
		}
		if !p.End.IsZero() {
			e.End = p.End.UnixNano()
		}
		enc = append(enc, e)
	}
	b, _ := json.Marshal(enc)
	return string(b)
}
