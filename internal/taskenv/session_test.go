package taskenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"vak/internal/engine"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
	"vak/internal/testenv"
	"vak/internal/worker"
	"vak/internal/worker/wire"
)

// Every Docker object the session tests create carries vak.test=1 and
// labelPkg; TestMain asserts at the end that none is left (containers,
// networks, volumes, images).
const labelPkg = "vak.test.pkg"

func TestMain(m *testing.M) {
	code := m.Run()
	if leftovers := leftoverObjects(); leftovers != "" {
		fmt.Fprintf(os.Stderr, "session tests left Docker objects behind:\n%s\n", leftovers)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// leftoverObjects lists (and removes) everything labelled by these tests.
func leftoverObjects() string {
	if exec.Command("docker", "info").Run() != nil {
		return ""
	}
	filter := "label=" + labelPkg + "=taskenv"
	var out []string
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}, {"image", "ls", "-q"}} {
		args := append(kind, "--filter", filter)
		o, _ := exec.Command("docker", args...).Output()
		for _, id := range strings.Fields(string(o)) {
			out = append(out, kind[0]+" "+id)
			switch kind[0] {
			case "ps":
				exec.Command("docker", "rm", "-f", "-v", id).Run()
			case "image":
				exec.Command("docker", "image", "rm", "-f", id).Run()
			default:
				exec.Command("docker", kind[0], "rm", id).Run()
			}
		}
	}
	return strings.Join(out, "\n")
}

// testUID and testGID are the session user: not the test's own (root), so
// ownership checks mean something.
const testUID, testGID = 4242, 4343

type fixture struct {
	t     *testing.T
	m     *Manager
	cli   *client.Client
	image string
	home  string // fake home with planted credentials
	run   string // this test's label value
}

// newFixture returns a manager on the test image whose objects carry a
// label unique to the test; the test's cleanup removes them and fails the
// test if any session was left running.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	img := testenv.Image(t)
	f := &fixture{t: t, image: img, run: randomHex(6)}
	f.home = t.TempDir()
	for _, d := range []string{".ssh", ".aws", ".config/gcloud", ".kube", ".docker"} {
		if err := os.MkdirAll(filepath.Join(f.home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(f.home, ".ssh", "id_ed25519"), []byte("SECRET"), 0o600)
	os.WriteFile(filepath.Join(f.home, ".netrc"), []byte("machine x password y"), 0o600)
	f.m = &Manager{
		StateDir: t.TempDir(),
		Worker:   testenv.Vak(t),
		User:     docker.User{UID: testUID, GID: testGID},
		Labels:   map[string]string{testenv.TestLabel: "1", labelPkg: "taskenv", "vak.test.run": f.run},
		UserHome: f.home,
	}
	cli, err := f.m.engine()
	if err != nil {
		t.Fatal(err)
	}
	f.cli = cli
	t.Cleanup(func() {
		f.m.Close()
		ctx := context.Background()
		res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", "vak.test.run="+f.run)})
		if err == nil && len(res.Items) > 0 {
			var names []string
			for _, c := range res.Items {
				names = append(names, strings.Join(c.Names, ","))
				cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			}
			t.Errorf("test left containers behind: %v", names)
		}
		imgs, err := cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", "vak.test.run="+f.run)})
		if err == nil {
			for _, i := range imgs.Items {
				cli.ImageRemove(ctx, i.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
	return f
}

// workspace returns a canonical workspace the session user can write.
func (f *fixture) workspace() string {
	f.t.Helper()
	ws, err := paths.CanonicalWorkspace(f.t.TempDir())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.Chmod(ws, 0o777); err != nil {
		f.t.Fatal(err)
	}
	return ws
}

func (f *fixture) spec(ws string) Spec {
	return Spec{Workspace: ws, BaseImage: f.image, Protected: sandbox.DefaultProtected}
}

func (f *fixture) create(spec Spec) *Session {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := f.m.Create(ctx, spec)
	if err != nil {
		f.t.Fatalf("Create: %v", err)
	}
	f.t.Cleanup(func() { f.m.Discard(context.Background(), s.ID()) })
	return s
}

// sh runs a shell line in s and fails the test on a protocol error.
func sh(t *testing.T, s *Session, line string) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Exec(ctx, Command{Argv: []string{"sh", "-c", line}})
	if err != nil {
		t.Fatalf("exec %q: %v", line, err)
	}
	return res
}

// Session reuse across turns: what turn 1 installs is there in turn 2 (even
// from another connection, as another process would see it); a discarded
// session is gone with everything it installed.
func TestSessionReuseAcrossTurns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ws := f.workspace()
	spec := f.spec(ws)
	spec.Task = "reuse"
	s := f.create(spec)
	if got, want := s.ID(), SessionID("reuse", ws); got != want {
		t.Fatalf("ID = %q, want %q", got, want)
	}
	// Turn 1: a user-level install into HOME (the writable root layer).
	r := sh(t, s, `mkdir -p "$HOME/bin" && printf '#!/bin/sh\necho tool-from-turn-1\n' > "$HOME/bin/tool" && chmod +x "$HOME/bin/tool" && echo done`)
	if r.ExitCode != 0 || r.Stdout != "done\n" {
		t.Fatalf("turn 1: %+v", r)
	}
	// Turn 2, through a second connection (the socket a later process uses).
	s2, err := f.m.Open(context.Background(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.Ready().Backend != worker.BackendContainer {
		t.Fatalf("ready = %+v", s2.Ready())
	}
	r2, err := s2.Exec(context.Background(), Command{Argv: []string{"tool"}, Env: map[string]string{"PATH": SessionHome + "/bin:/bin"}})
	if err != nil || r2.Stdout != "tool-from-turn-1\n" {
		t.Fatalf("turn 2: %+v %v", r2, err)
	}
	// Nothing was installed on the host: HOME is in the container only.
	if _, err := os.Stat(filepath.Join(SessionHome, "bin", "tool")); err == nil {
		t.Fatal("the install reached the host")
	}
	if err := s.Discard(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cli.ContainerInspect(context.Background(), s.Container(), client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Fatalf("container still there after Discard: %v", err)
	}
	if _, err := s2.Exec(context.Background(), Command{Argv: []string{"true"}}); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("exec after discard: %v", err)
	}
	if _, err := f.m.Open(context.Background(), s.ID()); !errors.Is(err, ErrNoSession) {
		t.Fatalf("open after discard: %v", err)
	}
	// The same task again is a fresh environment: the tool is gone.
	s3 := f.create(spec)
	if r := sh(t, s3, `test -e "$HOME/bin/tool" && echo present || echo absent`); r.Stdout != "absent\n" {
		t.Fatalf("fresh session has the old install: %+v", r)
	}
	// A second create for the same task and workspace is refused.
	if _, err := f.m.Create(context.Background(), spec); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	if err := s3.Discard(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(f.m.StateDir, "sessions", "run"))
	if len(entries) != 0 {
		t.Fatalf("socket directories left: %v", entries)
	}
}

// The container's shape: what the broker decided, and nothing else.
func TestSessionContainerShape(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ws := f.workspace()
	s := f.create(f.spec(ws))
	ci, err := f.cli.ContainerInspect(context.Background(), s.Container(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ci.Container
	hc := c.HostConfig
	lim := sandbox.DefaultLimits()
	if string(hc.NetworkMode) != "none" || len(hc.CapAdd) != 0 || fmt.Sprint(hc.CapDrop) != "[ALL]" ||
		len(hc.SecurityOpt) != 2 || hc.SecurityOpt[0] != "no-new-privileges" || !strings.HasPrefix(hc.SecurityOpt[1], "seccomp={") || hc.Privileged || hc.ReadonlyRootfs ||
		hc.Memory != lim.Memory || hc.NanoCPUs != int64(lim.CPUs*1e9) || hc.PidsLimit == nil || *hc.PidsLimit != int64(lim.Pids) ||
		!strings.Contains(hc.Tmpfs["/tmp"], fmt.Sprintf("size=%d", lim.TmpfsSize)) {
		t.Fatalf("host config: %+v", hc)
	}
	if c.Config.User != fmt.Sprintf("%d:%d", testUID, testGID) || c.Image != s.Image() || !strings.HasPrefix(s.Image(), "sha256:") {
		t.Fatalf("user %q image %q (pinned %q)", c.Config.User, c.Image, s.Image())
	}
	for _, k := range []string{LabelOwner, LabelSession, LabelCreated, engine.LabelWorkspace, engine.LabelManaged, engine.LabelKind, testenv.TestLabel} {
		if c.Config.Labels[k] == "" {
			t.Errorf("label %s missing: %v", k, c.Config.Labels)
		}
	}
	// Mounts: the workspace at its own path, the worker, the socket
	// directory, and nothing else.
	var mounts []string
	for _, mp := range c.Mounts {
		mounts = append(mounts, fmt.Sprintf("%s->%s rw=%t", mp.Source, mp.Destination, mp.RW))
	}
	want := map[string]bool{
		ws + "->" + ws + " rw=true":                       true,
		f.m.Worker + "->" + ContainerWorker + " rw=false": true,
	}
	if len(c.Mounts) != 3 {
		t.Fatalf("mounts = %v", mounts)
	}
	for _, mp := range mounts {
		if !want[mp] && !strings.HasSuffix(mp, "->"+ContainerRunDir+" rw=true") {
			t.Errorf("unexpected mount %s", mp)
		}
	}
	// Inside: no capabilities, no network but loopback, the worker is PID 1
	// and not dumpable (its /proc entries belong to root).
	r := sh(t, s, `grep CapEff /proc/self/status; ls /sys/class/net; stat -c '%u' /proc/1/environ; cat /proc/1/environ 2>&1 | head -c 40; echo; ls -ld "$HOME"`)
	if !strings.Contains(r.Stdout, "CapEff:\t0000000000000000") || !strings.Contains(r.Stdout, "\nlo\n") || strings.Contains(r.Stdout, "eth0") {
		t.Fatalf("inside: %q", r.Stdout)
	}
	if !strings.Contains(r.Stdout, "\n0\n") || strings.Contains(r.Stdout, worker.SpecEnv) {
		t.Fatalf("the worker's environment is readable by the session: %q", r.Stdout)
	}
	if !strings.Contains(r.Stdout, fmt.Sprint(testUID)) {
		t.Fatalf("HOME not owned by the session user: %q", r.Stdout)
	}
}

// Exec working directories must be inside the workspace: on the host and
// again inside the container.
func TestSessionExecCwdOutside(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ws := f.workspace()
	os.Mkdir(filepath.Join(ws, "sub"), 0o777)
	os.Symlink("/etc", filepath.Join(ws, "link-out"))
	s := f.create(f.spec(ws))
	ctx := context.Background()
	for _, dir := range []string{"/etc", "..", "../..", "sub/../../", "link-out", "/", filepath.Dir(ws)} {
		_, err := s.Exec(ctx, Command{Argv: []string{"pwd"}, Dir: dir})
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeOutside {
			t.Errorf("cwd %q: %v, want %s", dir, err, wire.CodeOutside)
		}
	}
	// The worker checks too: a raw request that skips the host check.
	var res wire.BashResult
	err := s.Client().Call(ctx, wire.OpBash, wire.BashArgs{Command: "pwd", Cwd: "/etc"}, &res)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeOutside {
		t.Fatalf("worker accepted cwd /etc: %v %+v", err, res)
	}
	// Control: inside the workspace works.
	r, err := s.Exec(ctx, Command{Argv: []string{"pwd"}, Dir: "sub"})
	if err != nil || r.Stdout != filepath.Join(ws, "sub")+"\n" {
		t.Fatalf("cwd sub: %+v %v", r, err)
	}
}

// The environment: only allowlisted host variables get in, the image's own
// environment is kept, vak's spec variable never reaches commands, and the
// variables the worker controls cannot be set.
func TestSessionEnvFiltered(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ws := f.workspace()
	spec := f.spec(ws)
	spec.Env = []string{"AWS_SECRET_ACCESS_KEY=leak"}
	if _, err := f.m.Create(context.Background(), spec); !errors.Is(err, ErrEnvNotAllowed) || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("disallowed variable: %v", err)
	}
	spec.Env = []string{"LANG=C.UTF-8", "TZ=UTC"}
	s := f.create(spec)
	r := sh(t, s, "env | sort")
	for _, want := range []string{"LANG=C.UTF-8\n", "TZ=UTC\n", "PATH=/bin\n", "HOME=" + SessionHome + "\n", "TMPDIR=/tmp\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("env lacks %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "VAK_") || strings.Contains(r.Stdout, "AWS_") {
		t.Fatalf("env leaks:\n%s", r.Stdout)
	}
	for _, k := range []string{"HOME", "VAK_WORKER_SPEC", "BAD NAME"} {
		if _, err := s.Exec(context.Background(), Command{Argv: []string{"true"}, Env: map[string]string{k: "x"}}); err == nil {
			t.Errorf("env %q accepted", k)
		}
	}
	r2, err := s.Exec(context.Background(), Command{Argv: []string{"sh", "-c", "echo $FOO"}, Env: map[string]string{"FOO": "bar"}})
	if err != nil || r2.Stdout != "bar\n" {
		t.Fatalf("explicit env: %+v %v", r2, err)
	}
}

// A timeout kills the command's whole tree: background jobs, processes that
// left its session with setsid, and double-forked ones. A background job of
// a command that finished normally lives on (proof that ps sees them).
func TestSessionTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.create(f.spec(f.workspace()))
	if r := sh(t, s, "sleep 3101 >/dev/null 2>&1 & echo bg"); r.ExitCode != 0 {
		t.Fatalf("control: %+v", r)
	}
	start := time.Now()
	res, err := s.Exec(context.Background(), Command{
		Argv:    []string{"sh", "-c", "sleep 3201 & setsid sleep 3202 & (sleep 3203 &) ; setsid sh -c 'sleep 3204 & sleep 3205' & echo started; sleep 3206"},
		Timeout: 2 * time.Second,
	})
	if err != nil || !res.TimedOut || !strings.Contains(res.Stdout, "started") {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the timeout took %v", d)
	}
	ps := sh(t, s, "ps -o args | grep '[s]leep 3' || true").Stdout
	if !strings.Contains(ps, "sleep 3101") {
		t.Fatalf("control background job missing (ps sees nothing?): %q", ps)
	}
	if strings.Contains(ps, "sleep 32") {
		t.Fatalf("the timed-out tree survived:\n%s", ps)
	}
	// Cancel through the context works the same way.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err = s.Exec(ctx, Command{Argv: []string{"sh", "-c", "setsid sleep 3301 & sleep 3302"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if ps := sh(t, s, "ps -o args | grep '[s]leep 33' || true").Stdout; ps != "" {
		t.Fatalf("the canceled tree survived:\n%s", ps)
	}
}

// The worker's death ends the session with a clear error: for the command
// in flight, for later commands, and for reattaching.
func TestSessionWorkerDeath(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.create(f.spec(f.workspace()))
	ci, err := f.cli.ContainerInspect(context.Background(), s.Container(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := ci.Container.State.Pid
	inflight := make(chan error, 1)
	go func() {
		_, err := s.Exec(context.Background(), Command{Argv: []string{"sleep", "300"}})
		inflight <- err
	}()
	time.Sleep(500 * time.Millisecond)
	// A process of the session cannot kill the worker (PID 1 of its namespace) ...
	if r := sh(t, s, "kill -9 1; echo $?"); r.Stdout == "" {
		t.Fatalf("kill attempt did not run: %+v", r)
	}
	if r := sh(t, s, "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("worker died from inside: %+v", r)
	}
	// ... the host can.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-inflight:
		if !errors.Is(err, ErrSessionEnded) || !strings.Contains(err.Error(), "137") {
			t.Fatalf("in-flight exec: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("in-flight exec did not end")
	}
	if _, err := s.Exec(context.Background(), Command{Argv: []string{"true"}}); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("later exec: %v", err)
	}
	if _, err := f.m.Open(context.Background(), s.ID()); !errors.Is(err, ErrSessionEnded) || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("reopen: %v", err)
	}
	if err := s.Discard(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// At least eight sessions at once do not interfere: each sees its own HOME
// and its own workspace, and two tasks on one workspace share only it.
func TestSessionConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 8
	var wss [n / 2]string
	for i := range wss {
		wss[i] = f.workspace()
	}
	sessions := make([]*Session, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			spec := f.spec(wss[i/2])
			spec.Task = fmt.Sprintf("t%d", i)
			s, err := f.m.Create(context.Background(), spec)
			if err == nil {
				sessions[i] = s
				var r *Result
				r, err = s.Exec(context.Background(), Command{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d > $HOME/me && echo %d > mine-%d && cat $HOME/me", i, i, i)}})
				if err == nil && r.Stdout != fmt.Sprintf("%d\n", i) {
					err = fmt.Errorf("session %d: %+v", i, r)
				}
			}
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.Discard(context.Background())
			}
		}
	}()
	if t.Failed() {
		return
	}
	for i, s := range sessions {
		r := sh(t, s, "cat $HOME/me; ls mine-* | tr '\\n' ' '")
		want := fmt.Sprintf("%d\nmine-%d mine-%d ", i, i/2*2, i/2*2+1)
		if r.Stdout != want {
			t.Errorf("session %d sees %q, want %q", i, r.Stdout, want)
		}
	}
}

// ReadOnly sessions: the workspace and the root filesystem are read-only;
// /tmp is the only scratch space (HOME is there).
func TestSessionReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ws := f.workspace()
	os.WriteFile(filepath.Join(ws, "keep"), []byte("original"), 0o666)
	spec := f.spec(ws)
	spec.Mode = sandbox.ReadOnly
	s := f.create(spec)
	r := sh(t, s, `(echo x > keep) 2>/dev/null && echo WROTE-WS; (echo x > /evil) 2>/dev/null && echo WROTE-ROOT; echo ok > /tmp/x && echo TMP-OK; echo "$HOME"; cat keep`)
	if strings.Contains(r.Stdout, "WROTE") || !strings.Contains(r.Stdout, "TMP-OK\n/tmp\noriginal") {
		t.Fatalf("read-only: %q", r.Stdout)
	}
	// The file tools inside refuse writes too.
	var wr wire.WriteResult
	err := s.Client().Call(context.Background(), wire.OpWrite, wire.WriteArgs{Path: "new", Content: "x"}, &wr)
	if err == nil {
		t.Fatal("write tool succeeded in a read-only session")
	}
}

// The file tools run inside the container under fsguard at the same paths.
func TestSessionFileTools(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ws := f.workspace()
	s := f.create(f.spec(ws))
	ctx := context.Background()
	var wr wire.WriteResult
	if err := s.Client().Call(ctx, wire.OpWrite, wire.WriteArgs{Path: "a.txt", Content: "hello"}, &wr); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(data) != "hello" {
		t.Fatalf("host sees %q", data)
	}
	// Protected paths and escapes are refused.
	for _, p := range []string{".git/hooks/pre-commit", "../escape", "/etc/passwd"} {
		if err := s.Client().Call(ctx, wire.OpWrite, wire.WriteArgs{Path: p, Content: "x"}, &wr); err == nil {
			t.Errorf("write %s accepted", p)
		}
	}
}

// A tag is resolved to the image ID at create time and the session is
// pinned to it: retagging afterwards changes nothing for the session (but a
// new session gets the new image: the retag was real).
func TestSessionPinsImage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	tag := "vak-test-pin-" + f.run + ":v"
	if _, err := f.cli.ImageTag(ctx, client.ImageTagOptions{Source: f.image, Target: tag}); err != nil {
		t.Fatal(err)
	}
	defer f.cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true})
	a, err := f.cli.ImageInspect(ctx, f.image)
	if err != nil {
		t.Fatal(err)
	}
	ws := f.workspace()
	spec := f.spec(ws)
	spec.BaseImage = tag
	s := f.create(spec)
	if s.Image() != a.ID {
		t.Fatalf("pinned %s, want %s", s.Image(), a.ID)
	}
	// Image B: the test image plus /marker, under the same tag.
	b := f.derivedImage("echo B > /marker")
	if _, err := f.cli.ImageTag(ctx, client.ImageTagOptions{Source: b, Target: tag}); err != nil {
		t.Fatal(err)
	}
	if r := sh(t, s, "cat /marker 2>/dev/null || echo no-marker"); r.Stdout != "no-marker\n" {
		t.Fatalf("the session runs the retagged image: %+v", r)
	}
	s2, err := f.m.Open(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if s2.Image() != a.ID {
		t.Fatalf("reattached session reports image %s", s2.Image())
	}
	spec.Task = "after-retag"
	s3 := f.create(spec)
	if r := sh(t, s3, "cat /marker"); r.Stdout != "B\n" || s3.Image() != b {
		t.Fatalf("control: new session did not get the retagged image: %+v %s", r, s3.Image())
	}
}

// derivedImage commits the test image after running line in it, labelled
// for cleanup, and returns its ID.
func (f *fixture) derivedImage(line string) string {
	f.t.Helper()
	ctx := context.Background()
	labels := map[string]string{}
	for k, v := range f.m.Labels {
		labels[k] = v
	}
	c, err := f.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Image: f.image, Config: &container.Config{Cmd: []string{"sh", "-c", line}, Labels: labels},
		HostConfig: &container.HostConfig{NetworkMode: "none"}})
	if err != nil {
		f.t.Fatal(err)
	}
	defer f.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := f.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		f.t.Fatal(err)
	}
	w := f.cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{})
	select {
	case <-w.Result:
	case err := <-w.Error:
		f.t.Fatal(err)
	}
	res, err := f.cli.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{Config: &container.Config{Labels: labels, Cmd: []string{"/bin/sh"}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return res.ID
}
