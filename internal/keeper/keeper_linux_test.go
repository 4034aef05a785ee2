package keeper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"vak/internal/fsguard"
)

// envFake makes the test binary a fake keeper on the socket it names (see
// fakeKeeper).
const envFake = "VAK_TEST_FAKE_KEEPER"

func TestMain(m *testing.M) {
	if sock := os.Getenv(envFake); sock != "" {
		os.Exit(serveFake(sock))
	}
	os.Exit(m.Run())
}

// serveFake answers every question with "no .git entry, nothing new", as
// an agent's impersonation of a keeper would, until stdin closes.
func serveFake(sock string) int {
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			bufio.NewReader(c).ReadBytes('\n')
			b, _ := json.Marshal(answer{Protocol: protocol, PID: os.Getpid(), Scan: &fsguard.Scan{Git: map[string]fsguard.Entry{}}})
			c.Write(append(b, '\n'))
			c.Close()
		}
	}()
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadBytes('\n')
	return 0
}

// fakeKeeper starts serveFake on sock, in new user and mount namespaces
// where isolated is set (as a process of a sandbox is).
func fakeKeeper(t *testing.T, sock string, isolated bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envFake+"="+sock)
	if isolated {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
		}
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the fake keeper: %v", err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the fake keeper did not start: %q", line)
	}
}

// startKeeper runs Serve on ws in this process until the test ends; it
// returns the socket and a channel that gets Serve's result.
func startKeeper(t *testing.T, ws string) (string, <-chan error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "k.sock")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ws, sock, time.Hour, func() { close(ready) }) }()
	t.Cleanup(cancel)
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("start: %v", err)
	}
	return sock, done
}

func workspace(t *testing.T) string {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func openTree(t *testing.T, ws string) *fsguard.Tree {
	t.Helper()
	tr, err := fsguard.OpenTree(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// The keeper's answer is what a walk says at the same moment, through
// every way an agent can plant a .git entry: deep in new directories, as a
// file, a link or a case variant, renamed in as part of a directory,
// moved out and back. A file created with the setuid bit is reported.
func TestScanAgreesWithWalk(t *testing.T) {
	ws := workspace(t)
	out := t.TempDir()
	for _, d := range []string{"a/b/c", "x/y"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock, _ := startKeeper(t, ws)
	tree := openTree(t, ws)
	abs := func(rel string) string { return filepath.Join(ws, rel) }
	steps := []struct {
		name string
		do   func() error
	}{
		{"nothing", func() error { return nil }},
		{"deep new repository", func() error { return os.MkdirAll(abs("n/o/p/.git/hooks"), 0o755) }},
		{"gitdir file", func() error { return os.WriteFile(abs("a/b/.git"), []byte("gitdir: /x\n"), 0o644) }},
		{"link named .GIT", func() error { return os.Symlink("/etc", abs("x/y/.GIT")) }},
		{"rename a directory holding one", func() error { return os.Rename(abs("n"), abs("x/n2")) }},
		{"move it out", func() error { return os.Rename(abs("x/n2"), filepath.Join(out, "n2")) }},
		{"and back, deeper", func() error { return os.Rename(filepath.Join(out, "n2"), abs("a/b/c/n3")) }},
		{"built outside, moved in", func() error {
			if err := os.MkdirAll(filepath.Join(out, "m/.git"), 0o755); err != nil {
				return err
			}
			return os.Rename(filepath.Join(out, "m"), abs("m"))
		}},
		{"remove one", func() error { return os.Remove(abs("a/b/.git")) }},
		{"root entry", func() error { return os.WriteFile(abs(".VSCode"), nil, 0o644) }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		r, err := Scan(sock, tree, false)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		walk, err := tree.Scan(false)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(r.Scan.Git, walk.Git) {
			t.Fatalf("%s: keeper says %q, a walk %q", st.name, r.Scan.GitNames(), walk.GitNames())
		}
		for _, name := range []string{".vscode", ".idea", "a"} {
			if r.Scan.Lacks(name) != walk.Lacks(name) {
				t.Fatalf("%s: Lacks(%q): keeper %v, walk %v", st.name, name, r.Scan.Lacks(name), walk.Lacks(name))
			}
		}
		if r.PID != os.Getpid() {
			t.Fatalf("answered by pid %d, want this process", r.PID)
		}
	}
	f, err := os.OpenFile(abs("x/y/su"), os.O_CREATE|os.O_WRONLY, 0o755|os.ModeSetuid)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Stat(abs("x/y/su")); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("control: the new file has no setuid bit: %v", err)
	}
	r, err := Scan(sock, tree, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Scan.Setuid, []string{"x/y/su"}) {
		t.Fatalf("setuid files: %q, want the new one", r.Scan.Setuid)
	}
}

// A process that is not a keeper of this process's own world is not
// believed: a fake keeper in other user and mount namespaces (as an
// agent's process in a sandbox is) that answers "nothing here" is refused,
// while the same fake outside them is taken at its word (the control: the
// namespace check is what refuses it).
func TestScanRefusesKeeperInOtherNamespaces(t *testing.T) {
	ws := workspace(t)
	if err := os.MkdirAll(filepath.Join(ws, "r/.git"), 0o755); err != nil {
		t.Fatal(err)
	}
	tree := openTree(t, ws)
	for _, isolated := range []bool{true, false} {
		sock := filepath.Join(t.TempDir(), "k.sock")
		fakeKeeper(t, sock, isolated)
		r, err := Scan(sock, tree, false)
		switch {
		case isolated && !errors.Is(err, ErrUntrusted):
			t.Fatalf("fake keeper in a sandbox's namespaces: %v (git %q), want ErrUntrusted", err, r.Scan.GitNames())
		case isolated:
			if !strings.Contains(err.Error(), "namespace") {
				t.Fatalf("error %q does not say why", err)
			}
		case err != nil:
			t.Fatalf("control: the fake keeper outside namespaces: %v", err)
		case len(r.Scan.Git) != 0:
			t.Fatalf("control: the fake's answer %q", r.Scan.GitNames())
		}
	}
}

// Nothing listening is ErrNoKeeper; a second keeper of the same socket
// leaves at once; a keeper leaves when its socket is removed, and one
// asked about a workspace directory that is no longer the one it watches
// says so and leaves.
func TestLifetime(t *testing.T) {
	ws := workspace(t)
	tree := openTree(t, ws)
	if _, err := Scan(filepath.Join(t.TempDir(), "none.sock"), tree, false); !errors.Is(err, ErrNoKeeper) {
		t.Fatalf("no keeper: %v, want ErrNoKeeper", err)
	}

	sock, done := startKeeper(t, ws)
	if err := Serve(context.Background(), ws, sock, time.Hour, nil); err != nil {
		t.Fatalf("second keeper: %v, want it to leave quietly", err)
	}
	if _, err := Scan(sock, tree, false); err != nil {
		t.Fatalf("control: the first keeper after the second left: %v", err)
	}
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, "socket removed")

	sock, done = startKeeper(t, ws)
	if err := os.Rename(ws, ws+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "planted/.git"), 0o755); err != nil {
		t.Fatal(err)
	}
	newTree := openTree(t, ws)
	// Asked before its next look at the path, it refuses; after, it is
	// gone already (or going: the connection is reset unanswered).
	if r, err := Scan(sock, newTree, false); err == nil {
		t.Fatalf("replaced workspace: the keeper answered (git %q), want a refusal", r.Scan.GitNames())
	}
	waitDone(t, done, "workspace replaced")
}

func waitDone(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: the keeper left with %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the keeper did not leave", what)
	}
}

// The socket's directory must be private: a keeper refuses one others can
// use.
func TestRefusesSharedDirectory(t *testing.T) {
	ws := workspace(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := Serve(context.Background(), ws, filepath.Join(dir, "k.sock"), time.Hour, nil)
	if err == nil || !strings.Contains(err.Error(), "only you") {
		t.Fatalf("shared directory: %v, want a refusal", err)
	}
}

// Running finds the keeper of a workspace in vak's state directory, and
// none before it starts or after it left.
func TestRunning(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	ws := workspace(t)
	if pid, err := Running(ws); pid != 0 || err != nil {
		t.Fatalf("before any keeper: %d, %v", pid, err)
	}
	sock := SocketOf(ws)
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- Serve(ctx, ws, sock, time.Hour, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("start: %v", err)
	}
	if pid, err := Running(ws); pid != os.Getpid() || err != nil {
		t.Fatalf("with a keeper: %d, %v, want this process", pid, err)
	}
	cancel()
	waitDone(t, done, "cancelled")
	if pid, err := Running(ws); pid != 0 || err != nil {
		t.Fatalf("after the keeper left: %d, %v", pid, err)
	}
}
