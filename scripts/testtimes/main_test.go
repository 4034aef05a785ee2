package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// module is a tiny module whose packages pass, fail (in a subtest, in a
// parallel test), crash, exit, have no test files and do not build.
var module = map[string]string{
	"go.mod": "module tmpmod\n\ngo 1.24\n",
	"good/good_test.go": `package good

import "testing"

func TestGood(t *testing.T) { t.Log("good-log-hidden") }
func TestGoodSub(t *testing.T) { t.Run("a", func(t *testing.T) { t.Log("good-sub-log-hidden") }) }
`,
	"bad/bad_test.go": `package bad

import (
	"fmt"
	"testing"
)

func TestOK(t *testing.T) { t.Log("ok-log-hidden") }
func TestBad(t *testing.T) {
	t.Log("bad-log-shown")
	fmt.Println("bad-stdout-shown")
	t.Run("fine", func(t *testing.T) {})
	t.Run("broken", func(t *testing.T) { t.Error("broken-subtest-error-shown") })
}
func TestParallelBad(t *testing.T) {
	t.Parallel()
	t.Fatal("parallel-fatal-shown")
}
`,
	"crash/crash_test.go": `package crash

import "testing"

func TestFirst(t *testing.T) { t.Log("first-log-hidden") }
func TestCrash(t *testing.T) { t.Log("before-crash-shown"); panic("crash-panic-shown") }
`,
	"exits/exits_test.go": `package exits

import (
	"os"
	"testing"
)

func TestExit(t *testing.T) { t.Log("before-exit-shown"); os.Exit(3) }
`,
	"nofiles/nofiles.go": "package nofiles\n",
	"broken/broken_test.go": `package broken

import "testing"

func TestBroken(t *testing.T) { undefinedShown() }
`,
}

func writeModule(t *testing.T) string {
	dir := t.TempDir()
	for name, body := range module {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// summaryLine matches a package's ok/FAIL/? line; its time is dropped.
var summaryLine = regexp.MustCompile(`(?m)^(ok  |FAIL|\?   )\t(\S+)(\t[0-9.]+s)?(.*)$`)

func summaries(out string) map[string]string {
	m := map[string]string{}
	for _, s := range summaryLine.FindAllStringSubmatch(out, -1) {
		m[s[2]] = s[1] + s[4]
	}
	return m
}

// tableRows parses the times table at the end of out.
func tableRows(t *testing.T, out string) [][]string {
	_, table, ok := strings.Cut(out, "test times, slowest first:\n")
	if !ok {
		t.Fatalf("no times table in:\n%s", out)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(table), "\n")[1:] {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// TestGoTestModule runs go test on the module plainly and through
// testtimes: the same exit status, the same package lines, every failure
// in full, no passing test's output, and the times of the packages that
// ran, slowest first.
func TestGoTestModule(t *testing.T) {
	dir := writeModule(t)
	plainCmd := exec.Command("go", "-C", dir, "test", "./...")
	plainOut, err := plainCmd.CombinedOutput()
	plainCode := plainCmd.ProcessState.ExitCode()
	if err == nil || plainCode != 1 {
		t.Fatalf("control: plain go test exited %d (%v), want 1:\n%s", plainCode, err, plainOut)
	}
	var out, errb bytes.Buffer
	code := run([]string{"go", "-C", dir, "test", "-json", "./..."}, &out, &errb)
	t.Logf("through testtimes (exit %d):\n%s%s", code, out.String(), errb.String())
	if code != plainCode {
		t.Errorf("exit %d, plain go test %d", code, plainCode)
	}
	want, got := summaries(string(plainOut)), summaries(out.String())
	if len(want) != 6 {
		t.Fatalf("control: plain go test printed %d package lines, want 6: %q", len(want), want)
	}
	for pkg, line := range want {
		if got[pkg] != line {
			t.Errorf("%s: %q, plain go test %q", pkg, got[pkg], line)
		}
	}
	for _, s := range []string{"bad-log-shown", "bad-stdout-shown", "--- FAIL: TestBad/broken", "broken-subtest-error-shown", "--- FAIL: TestParallelBad", "parallel-fatal-shown", "before-crash-shown", "panic: crash-panic-shown", "before-exit-shown", "undefinedShown"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q", s)
		}
	}
	for _, s := range []string{"hidden", "--- PASS: TestOK"} {
		if strings.Contains(out.String(), s) {
			t.Errorf("output has %q: a passing test's output", s)
		}
	}
	rows := tableRows(t, out.String())
	status := map[string]string{}
	last := -1.0
	for _, r := range rows {
		secs, err := strconv.ParseFloat(r[0], 64)
		if err != nil || len(r) != 3 {
			t.Fatalf("table row %q", r)
		}
		if last >= 0 && secs > last {
			t.Errorf("table not slowest first: %q", rows)
		}
		last, status[r[2]] = secs, r[1]
	}
	wantStatus := map[string]string{"tmpmod/good": "ok", "tmpmod/bad": "FAIL", "tmpmod/crash": "FAIL", "tmpmod/exits": "FAIL", "tmpmod/broken": "FAIL"}
	if len(status) != len(wantStatus) {
		t.Errorf("table %q, want the packages %v", rows, wantStatus)
	}
	for pkg, s := range wantStatus {
		if status[pkg] != s {
			t.Errorf("table: %s %q, want %q", pkg, status[pkg], s)
		}
	}
}

// TestExitStatus checks that testtimes exits with its command's status:
// passing tests, an exit status, a signal, a command that cannot start;
// and that a reported failure is never an exit status 0.
func TestExitStatus(t *testing.T) {
	dir := writeModule(t)
	for _, tc := range []struct {
		name string
		argv []string
		want int
		out  string
	}{
		{"passing packages", []string{"go", "-C", dir, "test", "-json", "./good", "./nofiles"}, 0, "ok  \ttmpmod/good"},
		{"exit status", []string{"sh", "-c", "echo not json; exit 3"}, 3, "not json\n"},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"no such command", []string{filepath.Join(dir, "nonexistent")}, exitFailure, ""},
		{"failure, exit 0", []string{"echo", `{"Action":"fail","Package":"x","Elapsed":1.5}`}, exitFailure, "FAIL   x"},
		{"usage", nil, exitUsage, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.argv, &out, &errb); code != tc.want || !strings.Contains(out.String(), tc.out) {
				t.Errorf("exit %d, want %d; output lacks %q:\n%s%s", code, tc.want, tc.out, out.String(), errb.String())
			}
		})
	}
}

// TestTimesFile checks -times (rows appended, nothing printed) and -table
// (one table of several runs, slowest first, then one of the tests that
// took at least -slow; subtests and skips are not in it).
func TestTimesFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "times")
	if err := os.WriteFile(file, []byte("2.0\tok\tinternal/x (as vak-ci)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	events := `{"Action":"pass","Package":"a","Test":"TestQuick","Elapsed":0.5}
{"Action":"pass","Package":"a","Test":"TestSlow/sub","Elapsed":0.9}
{"Action":"pass","Package":"a","Test":"TestSlow","Elapsed":1}
{"Action":"pass","Package":"a","Elapsed":1.25}
{"Action":"fail","Package":"b","Test":"TestSlower","Elapsed":2.5}
{"Action":"skip","Package":"b","Test":"TestSkipped","Elapsed":2.5}
{"Action":"fail","Package":"b","Elapsed":3}
{"Action":"skip","Package":"c","Elapsed":0.001}
`
	if code := run([]string{"-times", file, "-slow", "1s", "-label", "(no -race)", "printf", "%s", events}, &out, &out); code != exitFailure {
		t.Fatalf("-times: exit %d, want %d (a package failed): %s", code, exitFailure, out.String())
	}
	out.Reset()
	if code := run([]string{"-table", file}, &out, &out); code != 0 {
		t.Fatalf("-table: exit %d: %s", code, out.String())
	}
	want := "\ntest times, slowest first:\n" +
		"  seconds  status what\n" +
		"      3.0  FAIL   b (no -race)\n" +
		"      2.0  ok     internal/x (as vak-ci)\n" +
		"      1.2  ok     a (no -race)\n" +
		"\nslow tests, slowest first:\n" +
		"  seconds  status what\n" +
		"      2.5  FAIL   b TestSlower (no -race)\n" +
		"      1.0  ok     a TestSlow (no -race)\n"
	if out.String() != want {
		t.Errorf("-table printed\n%s\nwant\n%s", out.String(), want)
	}
	if code := run([]string{"-table", filepath.Join(t.TempDir(), "missing")}, &out, &out); code != exitFailure {
		t.Errorf("-table of a missing file: exit %d", code)
	}
}
