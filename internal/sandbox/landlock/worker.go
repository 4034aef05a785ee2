package landlock

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"vak/internal/errclass"
	"vak/internal/leanstage"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/trace"
)

// workerSpec is the landlock backend's part of the worker spec
// (sandbox.WorkerLaunch.Spec), read back by its worker entry point.
type workerSpec struct {
	Policy Policy `json:"policy"`
	// Namespaces says whether stage 1 runs in new namespaces.
	Namespaces bool `json:"namespaces,omitempty"`
}

var (
	_ sandbox.ProcessBackend = (*Backend)(nil)
	_ sandbox.Describer      = (*Backend)(nil)
	_ sandbox.StaleCleaner   = (*Backend)(nil)
)

// PrepareWorker implements sandbox.ProcessBackend: cmd starts stage 1 in new
// namespaces (or, when the kernel lacks them and AllowWeaker accepts it,
// stage 2 directly, with the broker answering its setsid notifications);
// where sessions get a cgroup (as root, or in a delegated cgroup), the
// worker joins it before it starts anything.
func (b *Backend) PrepareWorker(ctx context.Context, pp sandbox.ProcessPolicy, cmd *exec.Cmd) (_ *sandbox.WorkerLaunch, err error) {
	if err := sandbox.RefuseNetwork(b, pp.Network); err != nil {
		return nil, err
	}
	var fenceFiles []*os.File
	closeFence := func() {
		for _, f := range fenceFiles {
			f.Close()
		}
		fenceFiles = nil
	}
	defer func() {
		if err != nil {
			closeFence()
		}
	}()
	if err := CheckHomeTarget(pp.UserHome); err != nil && pp.AgentHome != "" {
		if !pp.AgentHomeFallback {
			return nil, err
		}
		pp.AgentHome = "" // the default home: a fresh one here
	}
	p := Policy{
		Workspace:   pp.Workspace,
		Mode:        pp.Mode,
		TempDir:     pp.TempDir,
		UserHome:    pp.UserHome,
		AgentHome:   pp.AgentHome,
		ReadPaths:   pp.ReadPaths,
		WritePaths:  pp.WritePaths,
		Limits:      pp.Limits,
		AllowWeaker: pp.AllowWeaker || b.AllowWeaker,
		UID:         os.Getuid(),
		GID:         os.Getgid(),
	}
	ns, err := Configure(cmd, b.StatusFor(p.AllowWeaker))
	if err != nil {
		return nil, err
	}
	useLeanStage(ctx, cmd)
	// Every process of the sandbox dies with stage 1 (the PID namespace's
	// init), so the broker can sweep the workspace once more at the end.
	// Every one of them runs under the seccomp filter, which refuses a
	// setuid or setgid mode (modeSyscalls).
	l := &sandbox.WorkerLaunch{Env: commandEnv(pp.Env, pp.UserHome, "/tmp"), SweepAtClose: true, NoSetIDModes: true}
	// The limits' cgroup, where the probe found one (always as root: it is
	// exempt from RLIMIT_NPROC; for others where theirs is delegated).
	cgroup, err := b.sessionCgroup(pp.Limits)
	if err != nil {
		if !p.AllowWeaker {
			return nil, fmt.Errorf("broker: %w; sandbox.allow_weaker accepts running without", err)
		}
		cgroup = nil
	}
	var supervisor, supRemote, goAhead, goAheadRemote *os.File
	if ns && cgroup != nil {
		// Stage 1 joins the cgroup while it starts up and builds the view,
		// and waits for the go-ahead before it starts stage 2.
		if goAheadRemote, goAhead, err = os.Pipe(); err != nil {
			cgroup.Remove()
			return nil, err
		}
		p.GoAhead = true
		l.SpecFirst = true
		l.ExtraFiles = []*os.File{goAheadRemote}
	}
	if !ns {
		// No stage 1: stage 2 is our child, and we answer its setsid
		// notifications (see Supervise).
		home := pp.TempDir
		if pp.AgentHome != "" {
			home = pp.AgentHome
		}
		l.Env = commandEnv(pp.Env, home, pp.TempDir)
		cmd.Args = append(cmd.Args, "--stage", "2")
		if supervisor, supRemote, err = SupervisorPair(); err != nil {
			if cgroup != nil {
				cgroup.Remove()
			}
			return nil, err
		}
		l.ExtraFiles = []*os.File{supRemote}
	}
	if pp.Network != nil {
		undo := func() {
			if cgroup != nil {
				cgroup.Remove()
			}
			for _, f := range []*os.File{goAhead, goAheadRemote, supervisor, supRemote} {
				if f != nil {
					f.Close()
				}
			}
		}
		if !ns {
			undo()
			return nil, fmt.Errorf("%w: the proxied network needs the sandbox's own network namespace (user namespaces are unavailable)", sandbox.ErrNoNetwork)
		}
		// O_PATH descriptors of the gateway's sockets, opened here, on the
		// host side: the view has no path to them. Stage 1 gets them after
		// the spec (fd 3) and the go-ahead, and never passes them on.
		for _, path := range []string{pp.Network.Fence.DataSocket, pp.Network.Fence.DNSSocket} {
			f, err := openPath(path)
			if err != nil {
				undo()
				return nil, fmt.Errorf("%w: gateway socket %s: %w", sandbox.ErrNoNetwork, path, err)
			}
			fenceFiles = append(fenceFiles, f)
		}
		first := 4 + len(l.ExtraFiles)
		l.ExtraFiles = append(l.ExtraFiles, fenceFiles...)
		p.Fence = &FenceSpec{DataFD: first, DNSFD: first + 1, TrustDir: pp.Network.Fence.TrustDir}
		l.Env = append(l.Env, pp.Network.Env...)
	}
	l.Spec = func(prot sandbox.Protection) (json.RawMessage, error) {
		p := p
		p.Protected, p.Pin = prot.ReadOnly, prot.Pin
		return json.Marshal(workerSpec{Policy: p, Namespaces: ns})
	}
	l.Started = func(pid int) error {
		closeFence() // the worker holds its own copies
		if supRemote != nil {
			supRemote.Close()
			go Supervise(supervisor, pid)
		}
		if cgroup == nil {
			return nil
		}
		err := cgroup.Add(pid)
		if goAhead != nil {
			goAheadRemote.Close()
			if err == nil {
				_, err = goAhead.Write([]byte{goAheadByte})
			}
			goAhead.Close()
		}
		return err
	}
	l.Cleanup = func() {
		closeFence()
		if goAhead != nil {
			goAhead.Close()
			goAheadRemote.Close()
		}
		if cgroup != nil {
			cgroup.Remove()
		}
	}
	return l, nil
}

// useLeanStage makes cmd execute the lean stage program this process
// embeds (package leanstage) instead of vak itself: the stages start faster
// that way, under the same restrictions. vak run --trace says which
// program runs.
func useLeanStage(ctx context.Context, cmd *exec.Cmd) {
	start := time.Now()
	p, err := leanstage.Path()
	if err != nil {
		trace.From(ctx).Add("worker program: vak itself ("+err.Error()+")", start, time.Now())
		return
	}
	cmd.Path = p
	trace.From(ctx).Add("worker program: the lean stage program", start, time.Now())
}

// ErrHomeTarget reports a HOME where the view cannot place a persistent
// home: the view's own /tmp, /dev or /proc, or a system directory.
var ErrHomeTarget = errclass.New(errclass.Config, "HOME cannot hold a persistent home")

// CheckHomeTarget says whether the view can place a persistent home at
// home (the user's HOME): not on one of its own mounts (HOME=/tmp is the
// sandbox's private /tmp), where it would be hidden or hide them. A fresh
// home there is a tmpfs like the rest and stays possible.
func CheckHomeTarget(home string) error {
	bad := home == "" || home == "/" || home == "/tmp" || home == "/dev/shm" ||
		paths.Within("/dev", home) || paths.Within("/proc", home)
	for _, sys := range DefaultSystemPaths {
		bad = bad || paths.Within(sys, home)
	}
	if bad {
		return fmt.Errorf("landlock: %w: HOME is %q, where the sandbox has its own directories; use --home fresh (or [sandbox] home = \"fresh\")", ErrHomeTarget, home)
	}
	return nil
}

// commandEnv is the host environment of commands plus HOME and TMPDIR as
// they appear in the sandbox.
func commandEnv(env []string, home, tmp string) []string {
	return append(append([]string(nil), env...), "HOME="+home, "TMPDIR="+tmp)
}

// WorkerEntry is the landlock backend's code in `vak __worker`, to be
// registered under sandbox.Landlock (sandbox.RegisterWorker) by the program
// that is re-executed as the worker: stage 1 builds the view (serving a
// proxied network with fence) and re-executes stage 2, which restricts
// itself and then serves.
func WorkerEntry(fence FenceServer) sandbox.WorkerEntry {
	return func(ctx context.Context, s sandbox.WorkerStart) (sandbox.WorkerOutcome, error) {
		return workerEntry(ctx, s, fence)
	}
}

// workerEntry is WorkerEntry's entry point.
func workerEntry(_ context.Context, s sandbox.WorkerStart, fence FenceServer) (sandbox.WorkerOutcome, error) {
	var ws workerSpec
	if len(s.Data) == 0 {
		return sandbox.WorkerOutcome{}, fmt.Errorf("landlock spec without policy")
	}
	if err := json.Unmarshal(s.Data, &ws); err != nil {
		return sandbox.WorkerOutcome{}, fmt.Errorf("landlock spec: %w", err)
	}
	if s.Stage == 1 && ws.Namespaces {
		code, err := Stage1(ws.Policy, s.RawSpec, []string{"vak", sandbox.WorkerCommand, "--stage", strconv.Itoa(2)}, fence)
		return sandbox.WorkerOutcome{Exited: true, Code: code}, err
	}
	phases := stage2Phases()
	out, err := Stage2(ws.Policy, ws.Namespaces)
	out.Phases = phases
	return out, err
}

// Describe implements sandbox.Describer: the restrictions in force, and
// whether they are weaker than designed.
func (b *Backend) Describe(context.Context) string {
	st := b.Status()
	d := "(" + st.Restricted + ")"
	if st.Weaker {
		d += "; WEAKER than designed, accepted by sandbox.allow_weaker: " + st.Problem
	}
	return d
}

// CleanStale implements sandbox.StaleCleaner: the empty cgroups of killed
// brokers.
func (b *Backend) CleanStale(alive func(pid int) bool) []string {
	return CleanStaleCgroups(alive)
}

// phasesEnv carries stage 1's timed phases to stage 2 (which reports them
// in its ready event, sandbox.WorkerOutcome.Phases): Unix nanoseconds, as
// JSON. It is stage 2's own environment, never a command's.
const phasesEnv = "VAK_STAGE1_PHASES"

type encodedPhase struct {
	Name  string `json:"n"`
	Start int64  `json:"s,omitempty"`
	End   int64  `json:"e,omitempty"`
}

// stage2Phases reads (and removes) phasesEnv; a phase left open by stage 1
// ends when this process began. Anything unreadable is dropped: the
// phases only serve the trace.
func stage2Phases() []sandbox.Phase {
	v, ok := os.LookupEnv(phasesEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(phasesEnv)
	var enc []encodedPhase
	if json.Unmarshal([]byte(v), &enc) != nil {
		return nil
	}
	ps := make([]sandbox.Phase, 0, len(enc))
	for _, e := range enc {
		p := sandbox.Phase{Name: e.Name, End: processStart}
		if e.Start != 0 {
			p.Start = time.Unix(0, e.Start)
		}
		if e.End != 0 {
			p.End = time.Unix(0, e.End)
		}
		ps = append(ps, p)
	}
	return ps
}
