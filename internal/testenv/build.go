package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var builds sync.Map // package path -> *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// Build compiles a main package of this module (e.g. "vak/cmd/vak") once per
// test process, statically (CGO_ENABLED=0) so the result also runs inside
// minimal containers, and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() {
		dir, err := os.MkdirTemp("", "vak-testbin-")
		if err != nil {
			r.err = err
			return
		}
		r.path = filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", r.path, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		r.out, r.err = cmd.CombinedOutput()
	})
	if r.err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, r.err, r.out)
	}
	return r.path
}

// Vak returns a freshly built vak binary.
func Vak(t testing.TB) string { return Build(t, "vak/cmd/vak") }

// Probe returns the static network/escape probe (scripts/probe).
func Probe(t testing.TB) string { return Build(t, "vak/scripts/probe") }
