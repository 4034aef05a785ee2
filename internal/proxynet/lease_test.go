package proxynet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/testenv"
)

// The lease's rules, without Docker: holders share it; a removal waits for
// the change lock (or, without wait, gives up) and only tries the lease; a
// holder cannot get it while a removal holds it; exclusive waits for the
// other holders; Release lets a removal in.
func TestLeaseRules(t *testing.T) {
	state, key := t.TempDir(), "0123456789ab"
	ctx := context.Background()
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 100*time.Millisecond) }
	hold := func() *Lease {
		t.Helper()
		ch, err := lockChange(ctx, state, key, true)
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		l, err := holdLease(ctx, state, key)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := hold(), hold() // shared: a second holder gets it at once
	for _, step := range []struct {
		name    string
		release *Lease
		want    bool // a removal gets the topology
	}{
		{"two holders", nil, false},
		{"one holder left", a, false},
		{"no holder", b, true},
	} {
		step.release.Release()
		r, err := startRemoval(ctx, state, key, true)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := r != nil; got != step.want {
			t.Fatalf("%s: a removal got the topology: %v, want %v", step.name, got, step.want)
		}
		if r == nil {
			continue
		}
		// While it removes, a new holder waits (for the change lock), a
		// second removal waits too, or gives up without wait.
		c, cancel := short()
		if _, err := lockChange(c, state, key, true); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a holder got the change lock during a removal: %v", err)
		}
		cancel()
		if _, err := holdLease(c, state, key); err == nil {
			t.Fatal("a shared lease was granted during a removal")
		}
		c, cancel = short()
		if _, err := startRemoval(c, state, key, true); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a second removal did not wait for the first: %v", err)
		}
		cancel()
		if r2, err := startRemoval(ctx, state, key, false); r2 != nil || err != nil {
			t.Fatalf("a removal without wait during a removal: %v %v", r2, err)
		}
		r.done()
		l := hold()
		l.Release()
		l.Release() // twice is fine
	}
	var nilLease *Lease
	nilLease.Release()

	// exclusive waits for the other holders (here until its context ends),
	// and gets the lease once they let go.
	c1, c2 := hold(), hold()
	c, cancel := short()
	if err := c1.exclusive(c); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exclusive with another holder: %v", err)
	}
	cancel()
	c2.Release()
	c1 = hold()
	if err := c1.exclusive(ctx); err != nil {
		t.Fatalf("exclusive of the only holder: %v", err)
	}
	if r, err := startRemoval(ctx, state, key, true); r != nil || err != nil {
		t.Fatalf("a removal got an exclusively held lease: %v %v", r, err)
	}
	if err := c1.shared(ctx); err != nil {
		t.Fatal(err)
	}
	c1.Release()
}

// leaseFixture is a workspace, a user config allowing one host and vak's
// state dir (below an XDG_STATE_HOME, for the vak binary) for the lease
// and gc tests; its topology is torn down when the test ends.
type leaseFixture struct {
	cli        *client.Client
	cfg, ws    string
	xdg, state string
	labels     map[string]string
}

func newLeaseFixture(t *testing.T) *leaseFixture {
	t.Helper()
	testenv.CheckLeftovers(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	f := &leaseFixture{cfg: filepath.Join(base, "config.toml"), xdg: mkdir(t, filepath.Join(base, "xdg")),
		labels: map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: testenv.TestID(t)}}
	f.state = filepath.Join(f.xdg, "vak")
	os.WriteFile(f.cfg, []byte("version = 1\n[[network.rules]]\nname = \"x\"\naction = \"allow\"\nhosts = [\"example.com\"]\n"), 0o600)
	var err error
	if f.ws, err = paths.CanonicalWorkspace(mkdir(t, filepath.Join(base, "ws"))); err != nil {
		t.Fatal(err)
	}
	if f.cli, err = engine.New(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Teardown(context.Background(), f.cli, f.state, f.ws, true) })
	return f
}

// options are the Ensure options of the fixture's workspace.
func (f *leaseFixture) options(t *testing.T) Options {
	return Options{Engine: f.cli, Workspace: f.ws, Binary: testenv.Vak(t), Sections: sectionsOf(t, f.cfg), ConfigFile: f.cfg, StateDir: f.state, Labels: f.labels}
}

// gc runs `vak gc` (the binary) on the test's objects with the fixture's
// state dir and returns its output; it fails t if gc fails.
func (f *leaseFixture) gc(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(testenv.Vak(t), "gc", "--label", testenv.TestIDLabel+"="+testenv.TestID(t))
	cmd.Env = append(os.Environ(), paths.EnvStateHome+"="+f.xdg)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("vak gc: %v\n%s", err, b)
	}
	return string(b)
}

// envLeaseHolder makes the test binary a lease holder (TestLeaseHolder):
// STATEDIR|WORKSPACE|CONFIG|TESTID.
const envLeaseHolder = "VAK_TEST_LEASE_HOLDER"

// TestLeaseHolder is not a test: run with envLeaseHolder set (by
// TestLeaseSurvivesOnlyItsHolder), it brings the workspace's topology up
// with Ensure, prints "held" and holds the lease until it is killed.
func TestLeaseHolder(t *testing.T) {
	spec := os.Getenv(envLeaseHolder)
	if spec == "" {
		t.Skip("a helper process of TestLeaseSurvivesOnlyItsHolder")
	}
	f := strings.Split(spec, "|")
	cli, err := engine.New()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{testenv.TestLabel: "1", testenv.TestIDLabel: f[3]}
	if _, err := Ensure(context.Background(), Options{Engine: cli, Workspace: f[1], Binary: testenv.Vak(t), Sections: sectionsOf(t, f[2]), ConfigFile: f[2], StateDir: f[0], Labels: labels}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("held")
	select {}
}

// A command that has brought a topology up and not yet started its
// sandbox container (here: another process, stopped right after Ensure)
// holds it: Teardown (what session rm and a run's end do) leaves it, and
// `vak gc` (through the vak binary) skips it and says so; once that process is SIGKILLed the kernel drops its
// lease and `vak gc` removes the topology (the positive control).
func TestLeaseSurvivesOnlyItsHolder(t *testing.T) {
	f := newLeaseFixture(t)
	cli, ws, state := f.cli, f.ws, f.state
	holder := exec.Command(os.Args[0], "-test.run=^TestLeaseHolder$", "-test.v")
	holder.Env = append(os.Environ(), envLeaseHolder+"="+strings.Join([]string{state, ws, f.cfg, testenv.TestID(t)}, "|"))
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "held" {
		t.Log(sc.Text())
	}
	key := Key(ws)
	up := func() bool { return healthy(context.Background(), cli, "vak-nc-"+key) }
	if !up() {
		t.Fatal("the holder did not bring the topology up")
	}
	if err := Teardown(context.Background(), cli, state, ws, false); err != nil || !up() {
		t.Fatalf("Teardown of a held topology: %v (up: %v)", err, up())
	}
	if o := f.gc(t); !strings.Contains(o, "skipped proxied network "+key+": a vak command holds it") || !up() {
		t.Fatalf("vak gc did not skip a held topology (up: %v):\n%s", up(), o)
	}
	holder.Process.Kill()
	holder.Wait()
	if o := f.gc(t); !strings.Contains(o, "removed proxied network "+key) || up() {
		t.Fatalf("vak gc after the holder was killed (up: %v):\n%s", up(), o)
	}
}

// Callers that bring the same workspace's topology up at once get one
// topology: the same netclient, and one network of each name (an Engine
// before API 1.44 makes a second network of a name that exists).
func TestEnsureConcurrent(t *testing.T) {
	f := newLeaseFixture(t)
	cli, ws, o := f.cli, f.ws, f.options(t)
	const n = 3
	nets := make([]*Net, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { nets[i], errs[i] = Ensure(context.Background(), o) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Ensure #%d: %v", i, errs[i])
		}
		nets[i].Release()
		if nets[i].NetclientID != nets[0].NetclientID {
			t.Errorf("Ensure #%d got netclient %s, #0 %s", i, nets[i].NetclientID, nets[0].NetclientID)
		}
	}
	ns, err := cli.NetworkList(context.Background(), client.NetworkListOptions{Filters: make(client.Filters).Add("label", LabelKey+"="+Key(ws))})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, nw := range ns.Items {
		got = append(got, nw.Name)
	}
	slices.Sort(got)
	if egress, sandbox, _, _, _ := names(Key(ws)); !slices.Equal(got, []string{egress, sandbox}) {
		t.Fatalf("networks of the topology: %v, want one %s and one %s", got, egress, sandbox)
	}
}
