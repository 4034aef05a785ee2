// Package stats summarises benchmark samples for vak's side-by-side
// comparisons: medians, percentiles and ratios, printed as Markdown rows.
package stats

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is a set of durations of one contender.
type Sample struct {
	Name string
	D    []time.Duration
}

// Add records one duration.
func (s *Sample) Add(d time.Duration) { s.D = append(s.D, d) }

// Quantile returns the q-quantile (0..1) by nearest rank.
func (s *Sample) Quantile(q float64) time.Duration {
	if len(s.D) == 0 {
		return 0
	}
	d := slices.Clone(s.D)
	slices.Sort(d)
	i := int(q*float64(len(d)-1) + 0.5)
	return d[i]
}

// Median is the 0.5 quantile.
func (s *Sample) Median() time.Duration { return s.Quantile(0.5) }

// Ms formats d in milliseconds with three decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

// Table prints a Markdown table of samples relative to the baseline base.
func Table(base *Sample, others ...*Sample) string {
	out := "| contender | n | median | p90 | median vs " + base.Name + " |\n|---|---|---|---|---|\n"
	for _, s := range append([]*Sample{base}, others...) {
		ratio := float64(s.Median()) / float64(base.Median())
		out += fmt.Sprintf("| %s | %d | %s | %s | %.3f× (%+s) |\n", s.Name, len(s.D), Ms(s.Median()), Ms(s.Quantile(0.9)), ratio, Ms(s.Median()-base.Median()))
	}
	return out
}

// Time runs fn and returns its wall time.
func Time(fn func() error) (time.Duration, error) {
	t := time.Now()
	err := fn()
	return time.Since(t), err
}

// MustTime is Time for a bench: a failure of fn ends the bench (log.Fatal).
func MustTime(fn func() error) time.Duration {
	d, err := Time(fn)
	if err != nil {
		log.Fatal(err)
	}
	return d
}

// RunQuiet runs argv with output discarded and returns an error on failure.
func RunQuiet(argv ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = nil
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%q: %w: %s", argv, err, out)
	}
	return nil
}

// BuildVak builds cmd/vak into a temp dir as releases are built
// (scripts/build-vak: static, with the lean stage program embedded) and
// returns its path.
func BuildVak() (string, error) {
	script, err := buildScript()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "vak-bench-")
	if err != nil {
		return "", err
	}
	bin := dir + "/vak"
	out, err := exec.Command(script, bin, "-trimpath").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, nil
}

// BuildLean builds the lean stage program into dir exactly as
// scripts/build-vak embeds it in vak and returns its path.
func BuildLean(dir string) (string, error) {
	script, err := buildScript()
	if err != nil {
		return "", err
	}
	if out, err := exec.Command(script, "-overlay", dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("scripts/build-vak -overlay: %w: %s", err, out)
	}
	return filepath.Join(dir, "program"), nil
}

// buildScript is this module's scripts/build-vak.
func buildScript() (string, error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find the module's directory: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(root)), "scripts", "build-vak"), nil
}

// Vak returns the vak binary to measure: given, when a -vak flag named
// one, else a static build of this tree (BuildVak). done removes what was
// built, and nothing when given was used.
func Vak(given string) (bin string, done func(), err error) {
	if given != "" {
		return given, func() {}, nil
	}
	if bin, err = BuildVak(); err != nil {
		return "", nil, err
	}
	return bin, func() { os.RemoveAll(filepath.Dir(bin)) }, nil
}

// Fill writes n small files into ws, ten per directory, in a tree three
// directories deep (vendor/d0/d3/d7/f4), plus a .git directory with a few
// entries, as a repository with its dependencies would have.
func Fill(ws string, n int) error {
	for _, d := range []string{".git/objects", ".git/refs/heads", ".git/hooks"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		d := i / 10
		dir := filepath.Join(ws, "vendor", "d"+strconv.Itoa(d/100), "d"+strconv.Itoa(d/10%10), "d"+strconv.Itoa(d%10))
		if i%10 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i%10)), []byte("x\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
