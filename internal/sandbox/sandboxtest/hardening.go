package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"vak/internal/broker"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// The hardening classes (issue 9): what a command holds besides files and
// the network. Each is an escape attempt with a control that shows the
// attempt is real.
func runHardening(t *testing.T, b Backend) {
	t.Run("CapabilitiesDropped", func(t *testing.T) { testCapabilities(t, b) })
	t.Run("TmpBounded", func(t *testing.T) { testTmpBounded(t, b) })
	t.Run("NoLeakedDescriptors", func(t *testing.T) { testNoLeakedDescriptors(t, b) })
	t.Run("SetIDModeRefused", func(t *testing.T) { testSetIDMode(t, b) })
}

// capFields are the lines of /proc/PID/status every command must show as
// zero capability sets, and no_new_privs set.
var capFields = []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}

func procStatus(text string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

// Every command runs with no capabilities at all, in every set, and with
// no_new_privs. A process-scoped backend forks every command from one
// long-lived multi-threaded worker, and capabilities are per thread: a
// drop that missed a thread shows up only in the commands that thread
// happens to fork, so 200 commands are checked. A command-scoped backend
// starts every command from scratch (a container runtime sets its
// capabilities), so a few suffice there.
func testCapabilities(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	// Control: this host process has capability sets that are not empty
	// (at least the bounding set), and the fields parse.
	host, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status on this host: %v", err)
	}
	hs := procStatus(string(host))
	for _, f := range capFields {
		if _, ok := hs[f]; !ok {
			t.Fatalf("control: host /proc/self/status has no %s", f)
		}
	}
	if hs["CapBnd"] == "0000000000000000" {
		t.Fatalf("control: the host's own bounding set is already empty; the check could not fail")
	}
	n := 200
	backend := b(t, e.Config)
	if backend.Scope() != sandbox.ScopeProcess {
		n = 5
	}
	bad := 0
	check := func(what string, stdout string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		st := procStatus(stdout)
		var wrong []string
		for _, f := range capFields {
			if st[f] != "0000000000000000" {
				wrong = append(wrong, f+"="+st[f])
			}
		}
		if st["NoNewPrivs"] != "1" {
			wrong = append(wrong, "NoNewPrivs="+st["NoNewPrivs"])
		}
		if len(wrong) > 0 {
			bad++
			if bad <= 5 {
				t.Errorf("%s holds %s", what, strings.Join(wrong, " "))
			}
		}
	}
	for i := 0; i < n; i++ {
		r := Sh(t, s, "cat /proc/self/status")
		check(fmt.Sprintf("command %d of %d", i+1, n), r.Stdout, nil)
	}
	if backend.Scope() == sandbox.ScopeProcess {
		n += testCapabilitiesOffTheLoop(t, s, backend, check)
	}
	if bad > 0 {
		t.Errorf("%d of %d commands held capabilities or lacked no_new_privs", bad, n)
	}
}

// testCapabilitiesOffTheLoop checks commands a process-scoped worker does
// not start from its request loop (sandbox.WorkerOutcome.Serve), which
// fork on another thread that must hold as little: interactive ones. (So
// do requests beyond the concurrent slots; internal/worker's tests show
// those take the same path.) It returns how many it checked.
func testCapabilitiesOffTheLoop(t *testing.T, s *broker.Session, backend sandbox.Backend, check func(string, string, error)) int {
	if sandbox.CheckInteractive(backend) != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const m = 10
	for i := range m {
		var mu sync.Mutex
		var out strings.Builder
		_, err := s.BashInteractive(ctx, wire.BashArgs{Command: "cat /proc/self/status", Interactive: true}, broker.Interaction{}, func(stream string, data []byte) {
			if stream == "stdout" {
				mu.Lock()
				out.Write(data)
				mu.Unlock()
			}
		})
		mu.Lock()
		check(fmt.Sprintf("interactive command %d of %d", i+1, m), out.String(), err)
		mu.Unlock()
	}
	return m
}

// The scratch places outside the workspace (/tmp, TMPDIR, and HOME with
// --home fresh) are bounded by sandbox.limits.tmpfs: writing more than the
// limit fails and leaves at most the limit; writing less succeeds
// (control). A persistent home is a directory on disk, bounded like the
// workspace (by the disk), not by this limit.
func testTmpBounded(t *testing.T, b Backend) {
	const limit = 16 << 20
	e := NewEnv(t, b)
	e.Config.Sandbox.Limits.TmpfsSize = limit
	e.Config.Sandbox.Home = sandbox.HomeChoice{Kind: sandbox.HomeFresh}
	s := e.Start(sandbox.WorkspaceWrite)
	for _, dir := range []string{"/tmp", "$TMPDIR", "$HOME"} {
		r := Sh(t, s, fmt.Sprintf(`d=%s; dd if=/dev/zero of="$d/vak-small" bs=1M count=4 2>/dev/null && echo SMALL-OK; rm -f "$d/vak-small"
dd if=/dev/zero of="$d/vak-big" bs=1M count=24 2>/dev/null; echo "rc=$?"; wc -c < "$d/vak-big"; rm -f "$d/vak-big"`, dir))
		if !strings.Contains(r.Stdout, "SMALL-OK") {
			t.Errorf("control: writing 4 MiB to %s failed: %q %q", dir, r.Stdout, r.Stderr)
			continue
		}
		lines := strings.Fields(r.Stdout)
		if len(lines) < 3 || lines[1] == "rc=0" {
			t.Errorf("writing 24 MiB to %s under a 16 MiB limit succeeded: %q %q", dir, r.Stdout, r.Stderr)
			continue
		}
		if n, err := strconv.ParseInt(lines[2], 10, 64); err != nil || n > limit {
			t.Errorf("%s holds %s bytes, more than the %d-byte limit", dir, lines[2], limit)
		}
	}
}

// Only stdin, stdout and stderr are open in a command, even when whoever
// started vak leaked a descriptor into it (here: this test process, with a
// pipe that is not close-on-exec).
func testNoLeakedDescriptors(t *testing.T, b Backend) {
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(p[0]); syscall.Close(p[1]) })
	// Control: a child of this process inherits the pipe.
	out, err := exec.Command("sh", "-c", "ls -l /proc/self/fd").CombinedOutput()
	if err != nil {
		t.Skipf("no /proc/self/fd listing on this host: %v %s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf(" %d -> ", p[1])) {
		t.Fatalf("control: a host child did not inherit the leaked fd %d:\n%s", p[1], out)
	}
	e := NewEnv(t, b)
	s := e.Start(sandbox.WorkspaceWrite)
	listing := regexp.MustCompile(`^/proc/[0-9]+/fd$`)
	for _, cmd := range []string{"ls -l /proc/self/fd", "sh -c 'sh -c \"ls -l /proc/self/fd\"'"} {
		r := Sh(t, s, cmd)
		if r.ExitCode != 0 {
			t.Fatalf("%s: exit %d %q", cmd, r.ExitCode, r.Stderr)
		}
		seen := map[int]bool{}
		for _, line := range strings.Split(r.Stdout, "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[len(f)-2] != "->" {
				continue
			}
			fd, err := strconv.Atoi(f[len(f)-3])
			if err != nil {
				continue
			}
			seen[fd] = true
			if fd > 2 && !listing.MatchString(f[len(f)-1]) {
				t.Errorf("%s: descriptor %d -> %s is open in the command", cmd, fd, f[len(f)-1])
			}
		}
		for fd := 0; fd <= 2; fd++ {
			if !seen[fd] {
				t.Errorf("%s: control: descriptor %d missing from the listing:\n%s", cmd, fd, r.Stdout)
			}
		}
	}
}

// A command cannot leave a setuid or setgid file in the workspace, through
// chmod(1) in its usual spellings or through any of the mode-changing
// syscalls. When vak runs as root such a file would be a setuid-root binary
// for every local user. Control: the same chmod on the host sets the bit
// (the filesystem keeps it), and chmod 0755 inside works.
func testSetIDMode(t *testing.T, b Backend) {
	e := NewEnv(t, b)
	ctl := filepath.Join(e.Workspace, "host-control")
	copyFile(t, e.Probe, ctl)
	if err := os.Chmod(ctl, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(ctl); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("control: the host cannot set a setuid bit in the workspace: %v %v", fi.Mode(), err)
	}
	os.Remove(ctl)
	s := e.Start(sandbox.WorkspaceWrite)
	attempts := map[string]string{} // file -> how
	controls := map[string]string{} // file -> how
	var script strings.Builder
	script.WriteString("cp /bin/sh ./ctl-chmod && chmod 0755 ./ctl-chmod\n")
	controls["ctl-chmod"] = "chmod 0755"
	for i, mode := range []string{"4755", "2755", "6755", "u+s", "g+s", "+s", "04777"} {
		f := fmt.Sprintf("x-chmod-%d", i)
		fmt.Fprintf(&script, "cp /bin/sh ./%s; chmod %s ./%s 2>/dev/null; echo %s=$?\n", f, mode, f, f)
		attempts[f] = "chmod " + mode
	}
	for _, via := range []string{"chmod", "fchmod", "fchmodat", "fchmodat2"} {
		for _, mode := range []string{"4755", "2711"} {
			f := "x-" + via + "-" + mode
			fmt.Fprintf(&script, "cp ./probe ./%s; ./probe chmod %s %s ./%s\n", f, via, mode, f)
			attempts[f] = via + "(" + mode + ")"
		}
		f := "ctl-" + via
		fmt.Fprintf(&script, "cp ./probe ./%s; ./probe chmod %s 0750 ./%s\n", f, via, f)
		controls[f] = via + "(0750)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := s.Bash(ctx, wire.BashArgs{Command: script.String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attempts: exit %d\n%s%s", r.ExitCode, r.Stdout, r.Stderr)
	for f, how := range attempts {
		fi, err := os.Lstat(filepath.Join(e.Workspace, f))
		if err != nil {
			t.Errorf("%s: the copy to chmod is missing: %v", how, err)
			continue
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s left %s with mode %v on the host", how, f, fi.Mode())
		}
	}
	for f, how := range controls {
		fi, err := os.Lstat(filepath.Join(e.Workspace, f))
		if err != nil {
			t.Errorf("control %s: %v", how, err)
			continue
		}
		want := os.FileMode(0o755)
		if strings.Contains(how, "0750") {
			want = 0o750
		}
		if fi.Mode().Perm() != want {
			if strings.Contains(how, "fchmodat2") && strings.Contains(r.Stdout, "function not implemented") {
				continue // the kernel predates fchmodat2 (Linux 6.6)
			}
			t.Errorf("control %s: %s has mode %v, want %v", how, f, fi.Mode(), want)
		}
	}
}
