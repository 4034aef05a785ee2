package worker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"vak/internal/paths"
	"vak/internal/worker/wire"
)

// shimExec is an Exec as a container-mode worker has it: commands under
// the reap shim (this test binary, see TestMain), started warm.
func shimExec(t *testing.T) *Exec {
	t.Helper()
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	reg := newChildRegistry()
	return &Exec{Workspace: ws, Env: []string{"PATH=" + os.Getenv("PATH")}, Launcher: []string{self, ReapCommand, "--"},
		Subreaper: true, reg: reg, warm: newWarmShims(self, reg)}
}

// A timeout kills the whole tree under the shim: background jobs, setsid
// escapes and double forks. (The docker tests prove the escapes survive a
// session-only kill.)
func TestShimTimeoutKillsTree(t *testing.T) {
	x := shimExec(t)
	tag := fmt.Sprintf("%d.%d", os.Getpid(), time.Now().UnixNano()%1000)
	line := fmt.Sprintf("sleep 61%[1]s & setsid sleep 62%[1]s & (sleep 63%[1]s &); setsid sh -c 'sleep 64%[1]s & sleep 65%[1]s' & echo started; sleep 66%[1]s", tag)
	res, err := x.Bash(context.Background(), wire.BashArgs{Command: line, TimeoutMS: 1500}, nil)
	if err != nil || !res.TimedOut || res.Stdout != "started\n" {
		t.Fatalf("%+v %v", res, err)
	}
	if left := procsMatching(tag); len(left) > 0 {
		t.Fatalf("survivors:\n%s", strings.Join(left, "\n"))
	}
	// Control: a normally finished command's background job lives on.
	if _, err := x.Bash(context.Background(), wire.BashArgs{Command: fmt.Sprintf("sleep 67%s >/dev/null 2>&1 &", tag)}, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(procsMatching("sleep 67"+tag)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("control background job not found")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range procsMatching("sleep 67" + tag) {
		var pid int
		fmt.Sscan(p, &pid)
		if pid > 0 {
			killTree(pid, nil)
		}
	}
}

// The shim is transparent: status, signals, stdin, environment, directory,
// output, and output held open by a background job.
func TestShimTransparent(t *testing.T) {
	x := shimExec(t)
	os.Mkdir(x.Workspace+"/d", 0o755)
	in := "from-stdin"
	for _, tc := range []struct {
		a    wire.BashArgs
		code int
		sig  string
		out  string
	}{
		{wire.BashArgs{Command: "exit 7"}, 7, "", ""},
		{wire.BashArgs{Command: "kill -TERM $$"}, 128 + 15, "terminated", ""},
		{wire.BashArgs{Command: "cat", Stdin: &in}, 0, "", "from-stdin"},
		{wire.BashArgs{Command: "echo $FOO; pwd", Cwd: "d", Env: map[string]string{"FOO": "bar"}}, 0, "", "bar\n" + "WS/d\n"},
		{wire.BashArgs{Command: "cat"}, 0, "", ""}, // stdin is empty, not inherited
	} {
		res, err := x.Bash(context.Background(), tc.a, nil)
		want := strings.ReplaceAll(tc.out, "WS", x.Workspace)
		if err != nil || res.ExitCode != tc.code || res.Signal != tc.sig || res.Stdout != want {
			t.Errorf("%q: %+v %v", tc.a.Command, res, err)
		}
	}
	start := time.Now()
	res, err := x.Bash(context.Background(), wire.BashArgs{Command: "sleep 3 & echo quick"}, nil)
	if err != nil || res.Stdout != "quick\n" {
		t.Fatalf("%+v %v", res, err)
	}
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Fatalf("held output delayed the result %v", d)
	}
	// Streaming goes through the shim's pipes too.
	var got strings.Builder
	var mu sync.Mutex
	_, err = x.Bash(context.Background(), wire.BashArgs{Command: "echo a; echo b >&2", Stream: true}, func(s string, d []byte) {
		mu.Lock()
		defer mu.Unlock()
		got.WriteString(s + ":" + string(d))
	})
	if err != nil || !strings.Contains(got.String(), "stdout:a\n") || !strings.Contains(got.String(), "stderr:b\n") {
		t.Fatalf("stream %q %v", got.String(), err)
	}
	// A warm shim killed before use (a session process can) is replaced.
	x.warm.fill()
	x.warm.mu.Lock()
	for _, s := range x.warm.ready {
		s.c.Process.Kill()
	}
	x.warm.mu.Unlock()
	if res, err := x.Bash(context.Background(), wire.BashArgs{Command: "echo ok"}, nil); err != nil || res.Stdout != "ok\n" {
		t.Fatalf("after killing warm shims: %+v %v", res, err)
	}
}

// procsMatching lists live processes whose command line contains s.
func procsMatching(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		data, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(data), "\x00", " ")
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i+2:]), "Z") {
				continue
			}
		}
		if strings.Contains(cmd, s) {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	return out
}

// TestShimSignalBeforeStart: a signal for an interactive command that
// arrives before the command started (the worker queues it) is delivered
// once the reap shim has started the command, never to a shim still
// starting up (whose Go runtime would die of it, so the command would
// never run). Here the command cannot start (a missing program): the shim
// must live to report 127, not die of the SIGINT meant for the command.
// Control: the same without a queued signal.
func TestShimSignalBeforeStart(t *testing.T) {
	x := shimExec(t)
	for _, queued := range []bool{false, true} {
		in := NewInteraction(wire.TTYSize{})
		if queued {
			if err := in.Signal("INT"); err != nil {
				t.Fatal(err)
			}
		}
		res, err := x.bash(context.Background(), wire.BashArgs{Interactive: true}, []string{"/nonexistent/vak-no-such-program"}, in, func(string, []byte) {})
		if err != nil {
			t.Fatalf("queued=%v: %v", queued, err)
		}
		if res.ExitCode != 127 || res.Signal != "" {
			t.Errorf("queued=%v: %+v; want the shim's 127 (program not found)", queued, res)
		}
	}
}
