package taskenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/testenv"
)

// A session under gVisor (Manager.Runtime = runsc, registered with
// GVisorSessionArgs): its commands run on gVisor's kernel (control: the
// same session under the default runtime does not), a second process
// reaches the worker through its socket, and the containment subset holds:
// the workspace is written as the session user, protected paths and the
// credentials outside stay out of reach, there is no network and no
// capability, a timed-out command's process tree is gone, and a snapshot
// keeps what the session installed.
func TestGVisorSession(t *testing.T) {
	rt := testenv.RequireGVisor(t)
	ctx := context.Background()
	for _, tc := range []struct {
		runtime string
		gvisor  bool
	}{{"", false}, {rt, true}} {
		f := newFixture(t)
		f.m.Runtime = tc.runtime
		s := f.create(f.spec(f.workspace()))
		if r := sh(t, s, "dmesg 2>&1 | head -1"); strings.Contains(r.Stdout, "Starting gVisor") != tc.gvisor {
			t.Fatalf("runtime %q: the kernel log begins %q, want gVisor's: %v", tc.runtime, r.Stdout, tc.gvisor)
		}
	}

	f := newFixture(t)
	f.m.Runtime = rt
	ws := f.workspace()
	if err := os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o777); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o666)
	s := f.create(f.spec(ws))
	ci, err := f.cli.ContainerInspect(ctx, s.Container(), client.ContainerInspectOptions{})
	if err != nil || ci.Container.HostConfig.Runtime != rt {
		t.Fatalf("the session container's runtime: %v, want %q", err, rt)
	}

	// A second connection: the worker's socket, made inside gVisor, seen
	// and connected to from the host.
	s2, err := f.m.Open(ctx, s.ID())
	if err != nil {
		t.Fatalf("open the session through its socket: %v", err)
	}
	s2.Close()

	for _, c := range []struct{ name, line, want string }{
		{"workspace write", "echo written > out && stat -c %u:%g out", "4242:4343\n"},
		{"protected path", "(echo evil >> .git/config) 2>/dev/null && echo WROTE; (touch .git/hooks/pre-commit) 2>/dev/null && echo WROTE; cat .git/config", "[core]\n"},
		{"credentials", "cat " + f.home + "/.ssh/id_ed25519 " + f.home + "/.netrc 2>/dev/null; ls " + f.home + " 2>/dev/null; echo done", "done\n"},
		{"no network", "wget -q -T 3 -O- http://1.1.1.1/ 2>/dev/null && echo REACHED; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", "lo\n"},
		{"no capabilities", "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status | tr -s '\\t' ' '", "CapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\n"},
	} {
		if r := sh(t, s, c.line); r.Stdout != c.want {
			t.Errorf("%s: stdout %q (exit %d, stderr %q), want %q", c.name, r.Stdout, r.ExitCode, r.Stderr, c.want)
		}
	}
	if data, err := os.ReadFile(filepath.Join(ws, "out")); string(data) != "written\n" {
		t.Errorf("the workspace write on the host: %q %v", data, err)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(data) != "[core]\n" {
		t.Errorf("the protected .git/config changed on the host: %q", data)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks", "pre-commit")); err == nil {
		t.Error("a hook was planted on the host")
	}

	// A timed-out command's whole tree goes, a background child included.
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	res, err := s.Exec(tctx, Command{Argv: []string{"sh", "-c", "sleep 1000 & sleep 1000"}, Timeout: time.Second})
	cancel()
	if err != nil || !res.TimedOut {
		t.Fatalf("the timed-out command: %+v %v", res, err)
	}
	if r := sh(t, s, "ps -o comm | grep -c sleep"); strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("sleeps left after the timeout: %q", r.Stdout)
	}

	// The warm pool: a container pooled under runc is not what a gVisor
	// create makes (the runtime is part of the pool key); one pooled under
	// gVisor is claimed, and serves on gVisor's kernel.
	pws := f.workspace()
	f.m.PoolSize, f.m.Runtime = 1, ""
	if n, err := f.m.FillPool(ctx, f.spec(pws)); err != nil || n != 1 {
		t.Fatalf("fill a runc pool: %d %v", n, err)
	}
	runcPool := f.poolContainers()
	f.m.Runtime = rt
	if n, err := f.m.FillPool(ctx, f.spec(pws)); err != nil || n != 1 {
		t.Fatalf("fill a gVisor pool: %d %v", n, err)
	}
	pspec := f.spec(pws)
	pspec.Task = "pooled"
	ps := f.create(pspec)
	if runcPool[ps.Container()] {
		t.Fatal("a gVisor create claimed a container pooled under runc")
	}
	if ci, err := f.cli.ContainerInspect(ctx, ps.Container(), client.ContainerInspectOptions{}); err != nil || ci.Container.HostConfig.Runtime != rt {
		t.Fatalf("the claimed container's runtime: %v", err)
	}
	if left := f.poolContainers(); len(left) != 1 || !left[firstKey(runcPool)] {
		t.Fatalf("the gVisor create did not claim the gVisor pool: left %v, runc pool %v", left, runcPool)
	}
	if r := sh(t, ps, "dmesg 2>&1 | grep -c 'Starting gVisor'"); r.Stdout != "1\n" {
		t.Fatalf("the pooled session's kernel: %+v", r)
	}
	for id := range f.poolContainers() {
		f.m.removeContainer(id, "", "")
	}
	f.m.PoolSize = 0

	// A snapshot keeps the session's install; a session from it has it.
	sh(t, s, `echo installed > "$HOME/pkg"`)
	ref, err := f.m.Snapshot(ctx, s.ID(), Manifest{"setup": "gvisor"})
	if err != nil {
		t.Fatalf("snapshot under gVisor: %v", err)
	}
	spec := f.spec(f.workspace())
	spec.BaseImage = ref.Ref
	s3 := f.create(spec)
	if r := sh(t, s3, `cat "$HOME/pkg"; dmesg 2>&1 | grep -c 'Starting gVisor'`); r.Stdout != "installed\n1\n" {
		t.Fatalf("a session from the snapshot: %+v", r)
	}
}

// The swapped-mount attack of TestSessionMountSwap under gVisor, whose
// worker compares the host's attributes (gVisor numbers inodes itself).
func TestGVisorSessionMountSwap(t *testing.T) {
	mountSwap(t, testenv.RequireGVisor(t))
}

// What cannot host a session is refused before anything is created, with
// the key and the fix named: a runtime the Engine does not list, a proxied
// network under gVisor, gVisor registered without --host-uds=create (the
// worker's socket), and a snapshot under gVisor without --overlay2=none
// (its changes would be missing from the image).
func TestGVisorSessionRefusals(t *testing.T) {
	rt := testenv.RequireGVisor(t)
	ctx := context.Background()
	f := newFixture(t)
	f.m.Runtime = "vak-no-such-runtime"
	_, err := f.m.Create(ctx, f.spec(f.workspace()))
	if !errors.Is(err, ErrRuntime) || !strings.Contains(err.Error(), `"vak-no-such-runtime"`) || !strings.Contains(err.Error(), "daemon.json") {
		t.Fatalf("an unlisted runtime: %v", err)
	}
	f.m.Runtime = rt
	spec := f.spec(f.workspace())
	spec.NetworkPolicy = sandbox.NetworkProxied
	f.m.ProxyNet = func(context.Context, string, bool) (*sandbox.NetworkAttachment, func(), error) {
		t.Error("a proxied network was brought up for a gVisor session")
		return nil, nil, errors.New("unreachable")
	}
	if _, err := f.m.Create(ctx, spec); !errors.Is(err, ErrRuntime) || !errors.Is(err, docker.ErrRuntimeNetwork) {
		t.Fatalf("proxied under gVisor: %v", err)
	}
	if list, _ := f.m.List(ctx); len(list) != 0 {
		t.Fatalf("refused creates left sessions: %+v", list)
	}
	// The registration checks, on the Engine's own description of runsc.
	for _, tc := range []struct {
		args            []string
		typ             string
		hostUDS, ovNone bool
	}{
		{nil, "", false, false},
		{[]string{"--host-uds=create"}, "", true, false},
		{[]string{"--host-uds", "all", "-overlay2=none"}, "", true, true},
		{[]string{"--host-uds=open", "--overlay2=root:self"}, "", false, false},
		{[]string{"--host-uds=create", "--host-uds=open"}, "", false, false},
		{nil, "io.containerd.runsc.v1", false, false},
	} {
		r := docker.Runtime{Name: "runsc", Path: "/usr/local/bin/runsc", Args: tc.args, Type: tc.typ}
		if tc.typ != "" {
			r.Path = ""
		}
		if !r.GVisor() || r.Runc() || r.HostUDS() != tc.hostUDS || r.OverlayNone() != tc.ovNone {
			t.Errorf("%+v: gvisor %v runc %v host-uds %v overlay none %v", r, r.GVisor(), r.Runc(), r.HostUDS(), r.OverlayNone())
		}
	}
	if r := (docker.Runtime{Name: "runc", Path: "runc"}); !r.Runc() || r.GVisor() {
		t.Errorf("runc: %+v", r)
	}
}

// firstKey is a key of m (the only one, where m has one).
func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}
