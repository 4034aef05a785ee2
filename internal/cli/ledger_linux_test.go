package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"vak/internal/testenv"
)

// ledgerTrace is the trace line of a cold run's workspace ledger.
var ledgerTrace = regexp.MustCompile(`workspace ledger \([^)]*\): (read (\d+) of (\d+) directories|walked[^\n]*)`)

// A cold `vak run` in a workspace it ran in before takes the workspace's
// directories from the ledger in vak's state directory (a stat each, and a
// read of those that changed), and every protected-path guarantee holds
// through it:
//
//   - positive control: with nothing changed, the second run reads no
//     directory;
//   - the agent plants a nested repository in a directory the ledger
//     trusts and puts the directory's times back: the sweep removes it
//     (the ctime, which nobody can set, changed);
//   - a repository the user makes between runs in a trusted directory is
//     read-only for the next command, whose other writes there work;
//   - the ledger is out of the sandbox's sight: the command can neither
//     read nor replace it (the host can read it: the control);
//   - a read-only run takes its plan from the ledger too, and its command
//     reads the workspace but writes nothing there.
func TestRunLedger(t *testing.T) {
	testenv.RequireLandlock(t)
	cfg := writeConfig(t, "version = 1\n[sandbox]\nbackend = \"landlock\"\n")
	ws := tempWorkspace(t)
	state := t.TempDir()
	for _, d := range []string{"a/b/c", "a/b/d", "x/y"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, d, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := tracedRun(t, cfg, ws, state)
	ledger := func(trace string) []string {
		t.Helper()
		m := ledgerTrace.FindStringSubmatch(trace)
		if m == nil {
			t.Fatalf("no ledger line in the trace:\n%s", trace)
		}
		return m
	}
	if m := ledger(func() string { _, e := run("true"); return e }()); !strings.HasPrefix(m[1], "walked") {
		t.Fatalf("first run: %q, want a walk", m[1])
	}
	// Older than the ledger's margin for racy directories (3 s), so that
	// the next run may trust them.
	time.Sleep(3500 * time.Millisecond)
	run("true")
	if m := ledger(func() string { _, e := run("true"); return e }()); m[2] != "0" || m[3] != "7" {
		t.Fatalf("unchanged workspace: %q, want 0 of 7 directories read", m[1])
	}

	var st os.FileInfo
	st, err := os.Stat(filepath.Join(ws, "a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	_, trace := run(fmt.Sprintf(`mkdir -p a/b/c/.git/hooks && printf '#!/bin/sh\necho pwned\n' > a/b/c/.git/hooks/post-checkout && chmod +x a/b/c/.git/hooks/post-checkout && touch a/b/c/made && touch -d @%d a/b/c`, st.ModTime().Unix()))
	if m := ledger(trace); m[2] != "0" {
		t.Fatalf("before the plant: %q, want nothing read", m[1])
	}
	if _, err := os.Lstat(filepath.Join(ws, "a", "b", "c", ".git")); err == nil {
		t.Fatal("the nested repository planted behind restored times survived the sweep")
	}
	if _, err := os.Stat(filepath.Join(ws, "a", "b", "c", "made")); err != nil {
		t.Fatalf("control: the command's own file is gone: %v", err)
	}
	if !strings.Contains(trace, "protected path a/b/c/.git") {
		t.Fatalf("the removal was not reported:\n%s", trace)
	}

	gitConfig := filepath.Join(ws, "x", "y", ".git", "config")
	if err := os.MkdirAll(filepath.Dir(gitConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gitConfig, []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, trace := run(`echo '[core] fsmonitor = /tmp/x' >> x/y/.git/config 2>/dev/null && echo ESCAPED; touch x/y/ok && echo WROTE`)
	if m := ledger(trace); m[2] == m[3] || m[2] == "0" {
		t.Fatalf("after the user's change: %q, want the changed directories read and not the others", m[1])
	}
	if b, _ := os.ReadFile(gitConfig); string(b) != "[core]\n" || strings.Contains(out, "ESCAPED") {
		t.Fatalf("the command wrote the new repository's config: %q", b)
	}
	if !strings.Contains(out, "WROTE") {
		t.Fatalf("control: the command could not write beside it: %q", out)
	}

	files, _ := filepath.Glob(filepath.Join(state, "vak", "ledgers", "*"))
	if len(files) != 1 {
		t.Fatalf("ledgers: %q, want one", files)
	}
	if _, err := os.ReadFile(files[0]); err != nil {
		t.Fatalf("control: the host cannot read the ledger: %v", err)
	}
	out, _ = run(fmt.Sprintf(`cat %q >/dev/null 2>&1 && echo READ; echo x > %q 2>/dev/null && echo REPLACED; ls %q >/dev/null 2>&1 && echo LISTED; echo done`, files[0], files[0], filepath.Dir(files[0])))
	if strings.Contains(out, "READ") || strings.Contains(out, "REPLACED") || strings.Contains(out, "LISTED") || !strings.Contains(out, "done") {
		t.Fatalf("the sandbox reached the ledger: %q", out)
	}

	out, trace = run(`cat x/y/f && touch x/y/ro 2>/dev/null && echo WROTE; true`, "--mode", "read-only")
	if m := ledger(trace); !strings.Contains(m[0], "(mount plan,") || m[2] == m[3] {
		t.Fatalf("read-only run: %q, want the plan from the ledger", m[0])
	}
	if _, err := os.Stat(filepath.Join(ws, "x", "y", "ro")); err == nil || strings.Contains(out, "WROTE") || !strings.HasPrefix(out, "x") {
		t.Fatalf("read-only run: stdout %q (want the file read and nothing written)", out)
	}
}

// tracedRun returns a function that runs `vak run --trace` of sh -c
// script (and flags) in ws with config cfg and vak's state directory in
// state, failing the test if it fails, and returns its stdout and stderr
// (the trace).
func tracedRun(t *testing.T, cfg, ws, state string) func(script string, flags ...string) (stdout, stderr string) {
	return func(script string, flags ...string) (stdout, stderr string) {
		t.Helper()
		args := append([]string{"--config", cfg, "run", "--trace", "-w", ws}, flags...)
		cmd := exec.Command(testenv.Vak(t), append(args, "--", "sh", "-c", script)...)
		cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("vak run %q: %v\n%s", script, err, errb.String())
		}
		return out.String(), errb.String()
	}
}
