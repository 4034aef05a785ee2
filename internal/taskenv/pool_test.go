package taskenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/sandbox"
)

// The warm pool: Create claims a started container made for exactly this
// spec, renamed to the session's name; a claimed container is never handed
// out again; a spec that differs (limits, image ID) does not claim.
func TestSessionPool(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.m.PoolSize = 2
	ctx := context.Background()
	ws := f.workspace()
	spec := f.spec(ws)
	n, err := f.m.FillPool(ctx, spec)
	if err != nil || n != 2 {
		t.Fatalf("fill: %d %v", n, err)
	}
	if n, _ := f.m.FillPool(ctx, spec); n != 0 {
		t.Fatalf("a full pool was filled again: %d", n)
	}
	pool := f.poolContainers()
	if len(pool) != 2 {
		t.Fatalf("pool = %v", pool)
	}
	// Two creates at once, pool of two: each gets its own container.
	type got struct {
		s   *Session
		err error
	}
	ch := make(chan got, 2)
	for i := 0; i < 2; i++ {
		go func() {
			sp := spec
			sp.Task = fmt.Sprintf("claim%d", i)
			s, err := f.m.Create(ctx, sp)
			ch <- got{s, err}
		}()
	}
	a, b := <-ch, <-ch
	if a.err != nil || b.err != nil {
		t.Fatalf("claims: %v %v", a.err, b.err)
	}
	defer a.s.Discard(ctx)
	defer b.s.Discard(ctx)
	if a.s.Container() == b.s.Container() || !pool[a.s.Container()] || !pool[b.s.Container()] {
		t.Fatalf("claims %s %s from pool %v", a.s.Container(), b.s.Container(), pool)
	}
	if left := f.poolContainers(); len(left) != 0 {
		t.Fatalf("pool after two claims: %v", left)
	}
	for _, s := range []*Session{a.s, b.s} {
		ci, err := f.cli.ContainerInspect(ctx, s.Container(), client.ContainerInspectOptions{})
		if err != nil || ci.Container.Name != "/"+SessionPrefix+s.ID() {
			t.Fatalf("claimed container name %q %v", ci.Container.Name, err)
		}
		if r := sh(t, s, "echo $HOME; id -u"); r.Stdout != fmt.Sprintf("%s\n%d\n", SessionHome, testUID) {
			t.Fatalf("claimed session: %+v", r)
		}
	}
	// The pool is empty: the next create makes its own container.
	sp := spec
	sp.Task = "direct"
	c := f.create(sp)
	if pool[c.Container()] {
		t.Fatal("a claimed container was handed out twice")
	}
	// Discard does not return a container to the pool.
	a.s.Discard(ctx)
	if left := f.poolContainers(); len(left) != 0 {
		t.Fatalf("a discarded session went back to the pool: %v", left)
	}
	// A different spec does not claim: other limits, or the tag now naming
	// another image.
	if _, err := f.m.FillPool(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pool = f.poolContainers()
	sp = spec
	sp.Task = "other-limits"
	sp.Limits = sandbox.Limits{Pids: 100}
	o := f.create(sp)
	if pool[o.Container()] {
		t.Fatal("a session with other limits claimed a pool container")
	}
	tag := "vak-test-pool-" + f.run + ":v"
	if _, err := f.cli.ImageTag(ctx, client.ImageTagOptions{Source: f.derivedImage("true"), Target: tag}); err != nil {
		t.Fatal(err)
	}
	defer f.cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true})
	sp = spec
	sp.Task = "other-image"
	sp.BaseImage = tag
	o2 := f.create(sp)
	if pool[o2.Container()] {
		t.Fatal("a session of another image claimed a pool container")
	}
	if len(f.poolContainers()) != 2 {
		t.Fatal("the pool changed")
	}
	// GC leaves a live pool alone; the fixture's cleanup checks nothing is
	// left after we remove it here.
	rep, err := f.m.GC(ctx)
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("gc removed live containers: %+v %v", rep, err)
	}
	for id := range f.poolContainers() {
		f.m.removeContainer(id, "", "")
	}
}

// poolContainers lists this test's unclaimed pool containers.
func (f *fixture) poolContainers() map[string]bool {
	list, err := f.m.List(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, c := range list {
		if strings.HasPrefix(c.Name, PoolPrefix) {
			out[c.Container] = true
		}
	}
	return out
}

// GC removes sessions that are over and nothing else: not live sessions,
// not containers vak did not create (no vak.managed label, another owner,
// or a name vak does not use), even when they carry vak's other labels.
func TestSessionGC(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	ws := f.workspace()
	live := f.create(f.spec(ws))
	// A session owned by a process that will die.
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	owned := f.spec(ws)
	owned.Task = "orphan"
	owned.OwnerPID = sleeper.Process.Pid
	orphan := f.create(owned)
	// An ended session (its worker is gone).
	ended := f.spec(ws)
	ended.Task = "ended"
	e := f.create(ended)
	if _, err := f.cli.ContainerKill(ctx, e.Container(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	// Decoys that GC must never touch, all exited and carrying the test's labels.
	decoy := func(name string, labels map[string]string) string {
		l := map[string]string{}
		for k, v := range f.m.Labels {
			l[k] = v
		}
		for k, v := range labels {
			l[k] = v
		}
		c, err := f.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name + "-" + f.run, Image: f.image,
			Config: &container.Config{Cmd: []string{"true"}, Labels: l}, HostConfig: &container.HostConfig{NetworkMode: "none"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}) })
		return c.ID
	}
	old := fmt.Sprint(time.Now().Add(-time.Hour).Unix())
	decoys := []string{
		decoy("vak-session-unmanaged", map[string]string{engine.LabelKind: KindSession, LabelOwner: fmt.Sprint(os.Getuid()), LabelCreated: old}),
		decoy("vak-session-otheruser", map[string]string{engine.LabelManaged: "true", engine.LabelKind: KindSession, LabelOwner: "99999", LabelCreated: old}),
		decoy("someone-elses", map[string]string{engine.LabelManaged: "true", engine.LabelKind: KindSession, LabelOwner: fmt.Sprint(os.Getuid()), LabelCreated: old}),
	}
	// Nothing to do while the owner lives.
	rep, err := f.m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 1 || rep.Removed[0].ID != e.ID() || !strings.Contains(rep.Removed[0].Reason, "ended") {
		t.Fatalf("gc with the owner alive: %+v", rep.Removed)
	}
	sleeper.Process.Kill()
	sleeper.Wait()
	rep, err = f.m.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 1 || rep.Removed[0].ID != orphan.ID() || rep.Removed[0].Reason != "its owner process is gone" {
		t.Fatalf("gc after the owner died: %+v", rep.Removed)
	}
	for _, id := range decoys {
		if _, err := f.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err != nil {
			t.Errorf("gc touched a container it did not create: %v", err)
		}
	}
	if _, err := live.Exec(ctx, Command{Argv: []string{"true"}}); err != nil {
		t.Fatalf("gc broke a live session: %v", err)
	}
	if _, err := f.m.Open(ctx, orphan.ID()); !errors.Is(err, ErrNoSession) {
		t.Fatalf("orphan's record survived gc: %v", err)
	}
}

// Idle timeout and maximum lifetime end a session by themselves (the worker
// exits), with a clear error, and GC removes what is left.
func TestSessionLifetimes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	f.m.IdleTimeout, f.m.MaxLifetime = 2*time.Second, time.Hour
	s := f.create(f.spec(f.workspace()))
	// Activity keeps it alive past the idle timeout ...
	for i := 0; i < 4; i++ {
		time.Sleep(time.Second)
		if _, err := s.Exec(ctx, Command{Argv: []string{"true"}}); err != nil {
			t.Fatalf("active session ended: %v", err)
		}
	}
	// ... idleness ends it.
	waitEnded(t, s)
	if _, err := s.Exec(ctx, Command{Argv: []string{"true"}}); !errors.Is(err, ErrSessionEnded) || !strings.Contains(err.Error(), "idle") {
		t.Fatalf("idle session: %v", err)
	}
	f.m.IdleTimeout, f.m.MaxLifetime = time.Hour, 3*time.Second
	sp := f.spec(f.workspace())
	sp.Task = "short-lived"
	s2 := f.create(sp)
	waitEnded(t, s2)
	// The workspace watcher records the end too; an exec after it has
	// exited still says why the session ended (it once said only "has
	// ended").
	dir, err := f.m.watchDir(s2.ID())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		_, err := os.Lstat(filepath.Join(dir, watchEndedFile))
		if held, herr := lockHeld(filepath.Join(dir, watchLockFile)); err == nil && herr == nil && !held {
			break // the watcher recorded the end and exited
		}
		if time.Now().After(deadline) {
			t.Fatal("the workspace watcher never recorded the session's end")
		}
	}
	if _, err := s2.Exec(ctx, Command{Argv: []string{"true"}}); !errors.Is(err, ErrSessionEnded) || !strings.Contains(err.Error(), "lifetime") {
		t.Fatalf("expired session: %v", err)
	}
	rep, err := f.m.GC(ctx)
	if err != nil || len(rep.Removed) != 2 {
		t.Fatalf("gc: %+v %v", rep, err)
	}
}

func waitEnded(t *testing.T, s *Session) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(time.Minute):
		t.Fatal("session did not end")
	}
}

// A session refuses a dynamically linked worker with a message that says
// how to fix it.
func TestSessionDynamicWorker(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dyn, err := exec.LookPath("ls")
	if err != nil || engine.CheckWorkerBinary(dyn, "") == nil {
		t.Skip("no dynamic binary on this host")
	}
	f.m.Worker = dyn
	if _, err := f.m.Create(context.Background(), f.spec(f.workspace())); !errors.Is(err, ErrWorkerBinary) || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("dynamic worker: %v", err)
	}
}

// Network policies other than none are refused, never weakened.
func TestSessionNetworkPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, p := range []sandbox.NetworkPolicy{sandbox.NetworkProxied, "host", "bridge"} {
		sp := f.spec(f.workspace())
		sp.NetworkPolicy = p
		if _, err := f.m.Create(context.Background(), sp); !errors.Is(err, ErrNetworkPolicy) {
			t.Errorf("policy %q: %v", p, err)
		}
	}
	// An unset policy is none.
	sp := f.spec(f.workspace())
	if checked, err := checkSpec(sp); err != nil || checked.NetworkPolicy != sandbox.NetworkNone {
		t.Fatalf("default policy %q %v", checked.NetworkPolicy, err)
	}
}
