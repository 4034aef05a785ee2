package worker

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"vak/internal/shellquote"
	"vak/internal/worker/wire"
)

// The broker runs a command-scoped backend's wrapper with BashArgv in a
// bash-only session, where the worker would have run `sh -c` of its quoted
// argv (an outer quoting layer). Both must give the same result.

func argvExec(t *testing.T) *Exec {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &Exec{Workspace: ws, Env: []string{"PATH=" + os.Getenv("PATH")}, Protected: []string{".git/hooks", ".vak"}}
}

// both runs argv directly and through the shell, and returns both results.
func both(t *testing.T, x *Exec, argv []string) (direct, shell *wire.BashResult) {
	t.Helper()
	ctx := context.Background()
	var err error
	if direct, err = x.BashArgv(ctx, argv, wire.BashArgs{}, nil); err != nil {
		t.Fatalf("BashArgv %q: %v", argv, err)
	}
	if shell, err = x.Bash(ctx, wire.BashArgs{Command: shellquote.Join(argv)}, nil); err != nil {
		t.Fatalf("Bash %q: %v", shellquote.Join(argv), err)
	}
	return direct, shell
}

func same(t *testing.T, argv []string, direct, shell *wire.BashResult) {
	t.Helper()
	if direct.ExitCode != shell.ExitCode || direct.Signal != shell.Signal || direct.Stdout != shell.Stdout || direct.Stderr != shell.Stderr {
		t.Errorf("%q:\n direct: exit %d signal %q out %q err %q\n sh -c:  exit %d signal %q out %q err %q", argv,
			direct.ExitCode, direct.Signal, direct.Stdout, direct.Stderr, shell.ExitCode, shell.Signal, shell.Stdout, shell.Stderr)
	}
}

func TestBashArgvQuoting(t *testing.T) {
	x := argvExec(t)
	// The inner layer: `sh -c SCRIPT NAME ARGS...`, as the docker wrap ends,
	// with every word the outer quoting must carry byte for byte.
	tricky := []string{
		"it's", `"double"`, "$HOME", "$(echo subst)", "`echo tick`", "a b  c", "", " ", "*", "?", "[a]",
		"~", "#comment", "x=y", "semi;colon", "a|b", "a&&b", "back\\slash", "new\nline", "tab\there",
		"'", "''", `'\''`, "\\'", "-n", "--", "%s", "é ü 日本",
	}
	script := `for a in "$0" "$@"; do printf '[%s]\n' "$a"; done; echo "$FOO" >&2; exit 7`
	argv := append([]string{"env", "FOO=bar baz", "sh", "-c", script}, tricky...)
	direct, shell := both(t, x, argv)
	same(t, argv, direct, shell)
	var want strings.Builder
	for _, a := range tricky {
		want.WriteString("[" + a + "]\n")
	}
	if direct.ExitCode != 7 || direct.Stdout != want.String() || direct.Stderr != "bar baz\n" {
		t.Fatalf("argv did not reach the command intact: exit %d\n%s\nwant\n%s\nstderr %q", direct.ExitCode, direct.Stdout, want.String(), direct.Stderr)
	}
}

func TestBashArgvSignals(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the messages are dash's (Debian's /bin/sh)")
	}
	x := argvExec(t)
	// A command killed by a signal: the shell reports 128+n and prints its
	// message (none for INT and PIPE).
	for _, sig := range []string{"SEGV", "TERM", "KILL", "INT", "PIPE", "USR1", "HUP", "ABRT", "ALRM", "QUIT"} {
		// A signal this process was started ignoring (nohup: HUP) stays
		// ignored in every command it runs, through both paths alike.
		if s := unix.SignalNum("SIG" + sig); s != 0 && signal.Ignored(s) {
			t.Logf("%s: ignored by this process (inherited), not testable", sig)
			continue
		}
		argv := []string{"sh", "-c", "kill -" + sig + " $$"}
		direct, shell := both(t, x, argv)
		same(t, argv, direct, shell)
		if direct.ExitCode <= 128 {
			t.Errorf("%s: exit %d", sig, direct.ExitCode)
		}
	}
}

func TestBashArgvErrors(t *testing.T) {
	x := argvExec(t)
	ctx := context.Background()
	if _, err := x.BashArgv(ctx, nil, wire.BashArgs{}, nil); err == nil {
		t.Error("empty argv accepted")
	}
	if _, err := x.BashArgv(ctx, []string{"echo", "a\x00b"}, wire.BashArgs{}, nil); err == nil {
		t.Error("NUL accepted")
	}
	// The working directory, environment and limits are Bash's.
	res, err := x.BashArgv(ctx, []string{"pwd"}, wire.BashArgs{Cwd: "/"}, nil)
	if err == nil {
		t.Errorf("cwd outside the workspace accepted: %+v", res)
	}
	os.Mkdir(filepath.Join(x.Workspace, "sub"), 0o755)
	sub := filepath.Join(x.Workspace, "sub")
	want := sub + "\n" + sub + " x1\n"
	res, err = x.BashArgv(ctx, []string{"sh", "-c", `pwd; echo "$PWD $X"; head -c 100 /dev/zero`}, wire.BashArgs{Cwd: "sub", Env: map[string]string{"X": "x1"}, MaxOutputBytes: int64(len(want) + 10)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Stdout, want) || !res.StdoutTruncated {
		t.Errorf("cwd/env/limit: %+v", res)
	}
	// The tripwire runs around it.
	res, err = x.BashArgv(ctx, []string{"mkdir", "-p", ".vak"}, wire.BashArgs{}, nil)
	if err != nil || len(res.ProtectedRemoved) == 0 {
		t.Errorf("tripwire: %+v %v", res, err)
	}
	// A timeout kills it.
	res, err = x.BashArgv(ctx, []string{"sleep", "30"}, wire.BashArgs{TimeoutMS: 200}, nil)
	if err != nil || !res.TimedOut || res.Signal == "" {
		t.Errorf("timeout: %+v %v", res, err)
	}
}
