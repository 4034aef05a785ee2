// Command testtimes runs `go test -json` and prints what plain `go test`
// prints (each package's ok/FAIL line, the full output of every failed test,
// and of a package that failed outside a test), then the test time of each
// package, slowest first, and then the slowest top-level tests (those
// that took at least -slow, 20 s by default), which say where a package's
// time went. It exits with the command's exit status.
//
// Usage:
//
//	testtimes [-label TEXT] [-times FILE] CMD [ARGS...]   # CMD is e.g. go test -json ./...
//	testtimes -table FILE
//
// With -times, the times are appended to FILE (lines "SECONDS\tSTATUS\tNAME",
// which scripts/test-nonroot also writes; a slow test's line has a fourth
// field, "test") instead of printed; -table prints
// the table of such a file. -label is appended to each package's name.
// scripts/test uses it; standard library only.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses of testtimes itself (otherwise it exits with the command's).
const (
	exitFailure = 1 // the command passed but reported a failed package
	exitUsage   = 2
)

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("testtimes", flag.ContinueOnError)
	fl.SetOutput(stderr)
	label := fl.String("label", "", "text appended to each package's name in the times")
	times := fl.String("times", "", "append the times to this file instead of printing them")
	table := fl.String("table", "", "print the times of this file, slowest first, and exit")
	slow := fl.Duration("slow", 20*time.Second, "also record top-level tests that took at least this long")
	if err := fl.Parse(args); err != nil {
		return exitUsage
	}
	if *table != "" {
		rows, err := readRows(*table)
		if err != nil {
			fmt.Fprintf(stderr, "testtimes: %v\n", err)
			return exitFailure
		}
		printTable(stdout, rows)
		return 0
	}
	if fl.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: testtimes [-label TEXT] [-times FILE] CMD [ARGS...] | testtimes -table FILE")
		return exitUsage
	}
	f := newFilter(stdout, *label)
	f.slow = slow.Seconds()
	code, err := runCommand(fl.Args(), f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "testtimes: %v\n", err)
		if code == 0 {
			code = exitFailure
		}
	}
	if code == 0 && f.failed {
		fmt.Fprintf(stderr, "testtimes: %s exited 0 but reported a failed package\n", fl.Arg(0))
		code = exitFailure
	}
	if *times != "" {
		if err := appendRows(*times, f.rows); err != nil {
			fmt.Fprintf(stderr, "testtimes: %v\n", err)
			return cmp.Or(code, exitFailure)
		}
		return code
	}
	printTable(stdout, f.rows)
	return code
}

// runCommand runs argv with its standard output read by f and returns its
// exit status (128+N when signal N killed it, as shells report it).
// SIGINT and SIGTERM are passed on to it, and testtimes itself keeps
// reading until the command ends, so that a run interrupted with Ctrl-C
// still prints what it got.
func runCommand(argv []string, f *filter, stderr io.Writer) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer func() { signal.Stop(sigs); close(sigs) }()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	readErr := f.read(out)
	io.Copy(io.Discard, out) // after a read error: the command must not block writing
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), readErr
		}
		return ee.ExitCode(), readErr
	case err != nil:
		return 0, err
	}
	return 0, readErr
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output events
	Test       string
	Elapsed    float64
	Output     string
}

// filter turns `go test -json` events back into plain go test output and
// collects the packages' times.
type filter struct {
	out    io.Writer
	label  string
	pkgs   map[string]*pkgOutput
	rows   []row
	failed bool
	// slow is the time in seconds from which a top-level test gets a row
	// of its own (zero: none do).
	slow float64
}

// pkgOutput is a package's output not printed yet: its own lines, and
// those of each running top-level test (with its subtests'), in order.
type pkgOutput struct {
	lines []string
	tests map[string][]string
	order []string // top-level tests, in the order they started
}

func newFilter(out io.Writer, label string) *filter {
	return &filter{out: out, label: label, pkgs: map[string]*pkgOutput{}}
}

// read filters r to its end. A line that is not an event is printed as it is.
func (f *filter) read(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var e event
			if line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
				f.out.Write(line)
			} else {
				f.handle(e)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the test output: %w", err)
		}
	}
}

func (f *filter) pkg(name string) *pkgOutput {
	p := f.pkgs[name]
	if p == nil {
		p = &pkgOutput{tests: map[string][]string{}}
		f.pkgs[name] = p
	}
	return p
}

func (f *filter) handle(e event) {
	switch {
	case e.Action == "build-output":
		io.WriteString(f.out, e.Output)
	case e.Package == "":
	case e.Test != "":
		f.handleTest(e)
	case e.Action == "output":
		p := f.pkg(e.Package)
		p.lines = append(p.lines, e.Output)
	case e.Action == "pass" || e.Action == "skip":
		p := f.pkg(e.Package)
		for _, l := range p.lines {
			if strings.HasPrefix(l, "ok  ") || strings.HasPrefix(l, "?   ") {
				io.WriteString(f.out, l)
			}
		}
		f.done(e, "ok")
	case e.Action == "fail":
		p := f.pkg(e.Package)
		// Tests still running when the package failed (os.Exit, a crash,
		// a timeout's panic) are printed in full first.
		for _, name := range p.order {
			f.writeLines(p.tests[name])
		}
		f.writeLines(p.lines)
		f.failed = true
		f.done(e, "FAIL")
	}
}

// handleTest keeps a test's lines with its top-level test's and prints
// them all when the top-level test fails.
func (f *filter) handleTest(e event) {
	p := f.pkg(e.Package)
	top, _, sub := strings.Cut(e.Test, "/")
	switch {
	case e.Action == "output":
		if _, ok := p.tests[top]; !ok {
			p.order = append(p.order, top)
		}
		p.tests[top] = append(p.tests[top], e.Output)
	case sub:
	case e.Action == "fail":
		f.writeLines(p.tests[top])
		fallthrough
	case e.Action == "pass" || e.Action == "skip":
		f.slowTest(e)
		delete(p.tests, top)
		p.order = slices.DeleteFunc(p.order, func(n string) bool { return n == top })
	}
}

func (f *filter) writeLines(lines []string) {
	for _, l := range lines {
		io.WriteString(f.out, l)
	}
}

// done records a package's time once it ran. A package-level skip is
// go test's "[no test files]": nothing ran (its Elapsed is not always 0,
// 1 ms on a slow machine), so it has no row.
func (f *filter) done(e event, status string) {
	delete(f.pkgs, e.Package)
	if e.Action == "skip" {
		return
	}
	name := e.Package
	if f.label != "" {
		name += " " + f.label
	}
	f.rows = append(f.rows, row{seconds: e.Elapsed, status: status, name: name})
}

// slowTest records a finished top-level test that took at least f.slow.
func (f *filter) slowTest(e event) {
	if f.slow <= 0 || e.Elapsed < f.slow || e.Action == "skip" {
		return
	}
	status := "ok"
	if e.Action == "fail" {
		status = "FAIL"
	}
	name := e.Package + " " + e.Test
	if f.label != "" {
		name += " " + f.label
	}
	f.rows = append(f.rows, row{seconds: e.Elapsed, status: status, name: name, test: true})
}

// row is one line of the times table.
type row struct {
	seconds float64
	status  string // ok or FAIL
	name    string
	test    bool // a slow top-level test's row, not a package's
}

func appendRows(file string, rows []row) error {
	fh, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	for _, r := range rows {
		kind := ""
		if r.test {
			kind = "\ttest"
		}
		fmt.Fprintf(fh, "%.1f\t%s\t%s%s\n", r.seconds, r.status, r.name, kind)
	}
	return fh.Close()
}

func readRows(file string) ([]row, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var rows []row
	for i, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		f := strings.Split(l, "\t")
		if len(f) != 3 && (len(f) != 4 || f[3] != "test") {
			return nil, fmt.Errorf("%s:%d: want SECONDS\\tSTATUS\\tNAME[\\ttest], got %q", file, i+1, l)
		}
		s, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: seconds: %w", file, i+1, err)
		}
		rows = append(rows, row{seconds: s, status: f[1], name: f[2], test: len(f) == 4})
	}
	return rows, nil
}

// printTable prints the packages' rows slowest first, then the slow
// tests' (if any) the same way.
func printTable(w io.Writer, rows []row) {
	tests := slices.DeleteFunc(slices.Clone(rows), func(r row) bool { return !r.test })
	pkgs := slices.DeleteFunc(slices.Clone(rows), func(r row) bool { return r.test })
	printRows(w, "test times, slowest first:", pkgs)
	printRows(w, "slow tests, slowest first:", tests)
}

func printRows(w io.Writer, title string, rows []row) {
	if len(rows) == 0 {
		return
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.seconds, a.seconds), strings.Compare(a.name, b.name))
	})
	fmt.Fprintf(w, "\n%s\n", title)
	fmt.Fprintf(w, "%9s  %-6s %s\n", "seconds", "status", "what")
	for _, r := range rows {
		fmt.Fprintf(w, "%9.1f  %-6s %s\n", r.seconds, r.status, r.name)
	}
}
