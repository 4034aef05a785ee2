package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// EnvBinDir names a directory of prebuilt binaries (vak, probe, testnet)
// that Build returns instead of compiling. The non-root test leg uses it:
// its user cannot read the Go module cache, so root builds the binaries
// (and the test binaries) into a world-readable directory first.
const EnvBinDir = "VAK_TEST_BINDIR"

// buildEnv is the environment the test process started with, taken before
// any test changes it. Build runs go with it: tests point HOME at a fake
// home (and set variables such as GOGC=1) before they ask for a binary, and
// under such a HOME go would find neither its build cache nor its module
// cache nor its config (GOFLAGS), and would compile every dependency from
// scratch, downloading the modules first, into that test's temp dir.
var buildEnv = os.Environ()

// Build compiles a main package of this module (e.g. "vak/cmd/vak", see
// Vak) once per test process, statically (CGO_ENABLED=0) so the result also
// runs inside minimal containers, and returns the binary's path. With $VAK_TEST_BINDIR
// set it returns the prebuilt binary of that name there instead.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	if dir := os.Getenv(EnvBinDir); dir != "" {
		p := filepath.Join(dir, filepath.Base(pkg))
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s but the prebuilt %s is missing: %v", EnvBinDir, dir, pkg, err)
		}
		return p
	}
	var root string
	if pkg == vakPkg {
		root = RepoRoot(t)
	}
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() {
		dir, err := os.MkdirTemp("", "vak-testbin-")
		if err != nil {
			r.err = err
			return
		}
		r.path = filepath.Join(dir, filepath.Base(pkg))
		args := []string{"build", "-o", r.path}
		if pkg == vakPkg {
			// As scripts/build-vak builds it: with the lean stage
			// program embedded (internal/leanstage).
			var ov string
			if ov, r.out, r.err = leanOverlay(root, dir); r.err != nil {
				return
			}
			args = append(args, "-overlay", ov)
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Env = append(slices.Clip(buildEnv), "CGO_ENABLED=0")
		r.out, r.err = cmd.CombinedOutput()
	})
	if r.err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, r.err, r.out)
	}
	return r.path
}

const vakPkg = "vak/cmd/vak"

// Vak returns a freshly built vak binary, built as scripts/build-vak
// builds it: with the lean stage program embedded.
func Vak(t testing.TB) string { return Build(t, vakPkg) }

// leanOverlay builds the lean stage program into dir with the repository's
// (root's) scripts/build-vak -overlay and returns the overlay file for go
// build.
func leanOverlay(root, dir string) (string, []byte, error) {
	cmd := exec.Command(filepath.Join(root, "scripts", "build-vak"), "-overlay", filepath.Join(dir, "lean"))
	cmd.Env = buildEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", stderr.Bytes(), err
	}
	return strings.TrimSpace(string(out)), nil, nil
}

// Probe returns the static network/escape probe (scripts/probe).
func Probe(t testing.TB) string { return Build(t, "vak/scripts/probe") }
