package cli

import (
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"vak/internal/testenv"
	"vak/internal/version"
)

// wantVersion is what `vak version` must say of a binary whose build info
// records rev, commit time and modified (rev empty: no VCS information).
type wantVersion struct {
	version, rev, time string
	modified           bool
}

// checkVersionCmd runs `version` and `version --json` through run and
// compares both with want.
func checkVersionCmd(t *testing.T, what string, run func(args ...string) string, want wantVersion) {
	t.Helper()
	paren := "no VCS information in this build"
	if want.rev != "" {
		paren = "rev " + want.rev[:12] + ", " + want.time
		if want.modified {
			paren += ", modified"
		}
	}
	line := "vak " + want.version + " (" + paren + ") " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if got := run("version"); got != line {
		t.Errorf("%s: vak version printed\n%q, want\n%q", what, got, line)
	}
	var got version.Build
	if err := json.Unmarshal([]byte(run("version", "--json")), &got); err != nil {
		t.Fatalf("%s: vak version --json: %v", what, err)
	}
	if got.Version != want.version || got.VCS != (want.rev != "") || got.Revision != want.rev || got.Time != want.time || got.Modified != want.modified {
		t.Errorf("%s: vak version --json = %+v, want %+v", what, got, want)
	}
}

// wantFromBuildInfo reads what a binary's build info records.
func wantFromBuildInfo(info *debug.BuildInfo) wantVersion {
	w := wantVersion{version: info.Main.Version}
	if w.version == "" {
		w.version = version.Devel
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			w.rev = s.Value
		case "vcs.time":
			w.time = s.Value
		case "vcs.modified":
			w.modified = s.Value == "true"
		}
	}
	return w
}

// TestVersionTestBinary runs `vak version` in this test binary, which go
// test builds without VCS information: it says so.
func TestVersionTestBinary(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("the test binary has no build info")
	}
	want := wantFromBuildInfo(info)
	if want.rev != "" {
		t.Logf("this test binary was built with VCS information (-buildvcs=true): revision %s", want.rev)
	}
	checkVersionCmd(t, "test binary", func(args ...string) string {
		code, out, errs := vakMain(t, "", args...)
		if code != 0 {
			t.Fatalf("vak %s: exit %d: %s", strings.Join(args, " "), code, errs)
		}
		return out
	}, want)
}

// runBinary returns a runner of the binary bin.
func runBinary(t *testing.T, bin string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", bin, strings.Join(args, " "), err)
		}
		return string(out)
	}
}

// TestVersionBuilt checks `vak version` of real vak binaries against the
// truth. As a user (the non-root leg: prebuilt binaries, no Go), the
// prebuilt vak against the build info its file records. With Go: vak
// built from a git clone of this tree (the working tree's changes
// committed) with VCS information, clean and then modified, against the
// clone's commit; and built with -buildvcs=false, which says it has no
// VCS information instead of lying.
func TestVersionBuilt(t *testing.T) {
	if os.Getenv(testenv.EnvBinDir) != "" {
		info, err := buildinfo.ReadFile(workerExecutable)
		if err != nil {
			t.Fatal(err)
		}
		w := wantFromBuildInfo(info)
		t.Logf("prebuilt %s: %+v", workerExecutable, w)
		checkVersionCmd(t, "prebuilt vak", runBinary(t, workerExecutable), w)
		return
	}
	t.Parallel()
	src, dir := vcsClone(t), t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", src}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	build := func(name string, args ...string) string {
		t.Helper()
		bin := filepath.Join(dir, name)
		cmd := exec.Command("go", append(append([]string{"build", "-trimpath", "-o", bin}, args...), "./cmd/vak")...)
		cmd.Dir, cmd.Env = src, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return bin
	}
	rev := git("rev-parse", "HEAD")
	ct, err := strconv.ParseInt(git("log", "-1", "--format=%ct"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	commitTime := time.Unix(ct, 0).UTC().Format(time.RFC3339)
	moduleVersion := func(bin string) string {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		return info.Main.Version
	}

	clean := build("vak-clean", "-buildvcs=true")
	v := moduleVersion(clean)
	if !strings.Contains(v, rev[:12]) || strings.HasSuffix(v, "+dirty") {
		t.Errorf("control: the clean build's module version %q does not name %s", v, rev[:12])
	}
	checkVersionCmd(t, "clean build", runBinary(t, clean), wantVersion{version: v, rev: rev, time: commitTime})

	if err := os.WriteFile(filepath.Join(src, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	modified := build("vak-modified", "-buildvcs=true")
	checkVersionCmd(t, "modified tree", runBinary(t, modified), wantVersion{version: moduleVersion(modified), rev: rev, time: commitTime, modified: true})

	checkVersionCmd(t, "-buildvcs=false", runBinary(t, build("vak-novcs", "-buildvcs=false")), wantVersion{version: version.Devel})
}

// vcsClone makes a git clone of this repository whose one new commit holds
// the working tree as it is (tracked and untracked files, ignored ones
// left out), and returns its directory. A clone, because Go stamps VCS
// information only where .git is a directory (not in a git worktree).
func vcsClone(t *testing.T) string {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): no VCS build to test", err)
	}
	repo := strings.TrimSpace(string(top))
	src := filepath.Join(t.TempDir(), "src")
	git := func(dir string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "core.hooksPath=/dev/null", "-c", "user.name=vak test", "-c", "user.email=vak-test@invalid", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	head := strings.TrimSpace(string(git(repo, "rev-parse", "HEAD")))
	git(repo, "clone", "-q", "--shared", "--no-checkout", repo, src)
	git(src, "reset", "-q", head)
	var links []string
	for _, f := range strings.Split(string(git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")), "\x00") {
		if f == "" {
			continue
		}
		from, to := filepath.Join(repo, f), filepath.Join(src, f)
		fi, err := os.Lstat(from)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // deleted in the working tree
		case err != nil:
			t.Fatal(err)
		case fi.Mode()&fs.ModeSymlink != 0:
			links = append(links, f)
			continue
		case !fi.Mode().IsRegular():
			continue
		}
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	// Links last, so that nothing is written through one.
	for _, f := range links {
		target, err := os.Readlink(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(src, f)); err != nil {
			t.Fatal(err)
		}
	}
	git(src, "add", "-A")
	git(src, "commit", "-q", "--allow-empty", "-m", "vak version test: the working tree")
	return src
}
