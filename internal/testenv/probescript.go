package testenv

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"vak/internal/egress/egressconfig"
	"vak/internal/shellquote"
)

// ProbeMark starts the lines ProbeScript writes around each command's
// output; no probe prints it.
const ProbeMark = "=== vaktest-probe "

// ProbeScript is a sh script that runs every command at once (escape
// probes mostly wait out a timeout to show that nothing answers, so one
// after the other they would add up), each one's output (stdout and
// stderr) and exit status in files of a temporary directory, and then
// prints their records in order: each one's output between a begin line
// and an end line that carries its exit status (read them with
// ProbeRecord), and last a line saying all ran (ProbeAllRan). A command is
// words split on spaces, each quoted for the shell: no shell syntax. A
// script that cannot make its directory ends without the last line.
func ProbeScript(commands []string) string {
	var b strings.Builder
	b.WriteString("d=$(mktemp -d) || exit 1\n")
	for i, c := range commands {
		fmt.Fprintf(&b, "( %s >\"$d/%d\" 2>&1; echo $? >\"$d/%d.rc\" ) &\n", shellquote.Join(strings.Fields(c)), i, i)
	}
	b.WriteString("wait\n")
	for i := range commands {
		fmt.Fprintf(&b, "echo; echo '%s%d begin'; cat \"$d/%d\"; echo; echo \"%s%d rc=$(cat \"$d/%d.rc\")\"\n", ProbeMark, i, i, ProbeMark, i, i)
	}
	fmt.Fprintf(&b, "rm -rf \"$d\"\necho '%s'\n", ProbeAllRan(len(commands)))
	return b.String()
}

// ProbeAllRan is the line ProbeScript of n commands ends with.
func ProbeAllRan(n int) string { return fmt.Sprintf("%sall %d ran", ProbeMark, n) }

// ProbeRecord is command i's output and exit status in out (ProbeScript's
// output); ok is false when out has no complete record of it.
func ProbeRecord(out string, i int) (output string, rc int, ok bool) {
	begin := fmt.Sprintf("%s%d begin\n", ProbeMark, i)
	_, rest, found := strings.Cut(out, begin)
	if !found {
		return "", 0, false
	}
	body, end, found := strings.Cut(rest, "\n"+ProbeMark+strconv.Itoa(i)+" rc=")
	if !found {
		return "", 0, false
	}
	line, _, _ := strings.Cut(end, "\n")
	rc, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return "", 0, false
	}
	return strings.TrimSpace(body), rc, true
}

// ProbeOutputs reads each command's output from out, ProbeScript's output
// for commands. A command without a complete record, or a script that did
// not reach its end, fails t; the outputs there are are still returned.
func ProbeOutputs(t testing.TB, out string, commands []string) []string {
	t.Helper()
	if !strings.Contains(out, ProbeAllRan(len(commands))) {
		t.Errorf("the probe script did not run every command:\n%s", out)
	}
	outs := make([]string, len(commands))
	for i, c := range commands {
		got, _, ok := ProbeRecord(out, i)
		if !ok {
			t.Errorf("%s: no complete record of this command in the output", c)
		}
		outs[i] = got
	}
	return outs
}

// ProbeEscaped says whether a probe's output shows that it got past the
// gateway: an OK 200, the canary's own answer, or a DNS answer other than
// the gateway's sinkhole (a denied name may get that block answer, never
// a real one).
func ProbeEscaped(out string) bool {
	sinkOnly := strings.Contains(out, "NOERROR A "+egressconfig.DefaultSinkhole.String()+" ")
	return strings.Contains(out, "OK 200") || strings.Contains(out, "canary") || (strings.Contains(out, "NOERROR") && !sinkOnly)
}
