package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vak/internal/fsguard"
	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(names)
}

// Commands leave no descriptor open in the worker: a leaked one per
// command (the tripwire's workspace probe did) grows the table that every
// later command's fork copies and exec closes, until the descriptor limit
// stops commands.
func TestBashLeavesNoDescriptor(t *testing.T) {
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	x := &Exec{Workspace: ws, Env: []string{"PATH=" + os.Getenv("PATH")}, Protected: []string{".git/hooks", ".vak"}}
	run := func() {
		t.Helper()
		r, err := x.Bash(context.Background(), wire.BashArgs{Command: "echo out; echo err >&2"}, nil)
		if err != nil || r.ExitCode != 0 || r.Stdout != "out\n" || r.Stderr != "err\n" {
			t.Fatalf("bash: %v %+v", err, r)
		}
	}
	run() // opens what lives as long as the worker (/dev/null)
	before := openFDs(t)
	const n = 60
	for range n {
		run()
	}
	if grown := openFDs(t) - before; grown >= n/2 {
		t.Fatalf("%d commands left %d more descriptors open in the worker", n, grown)
	}
}

// Output larger than the copy buffer arrives whole and in order, and the
// cap truncates it at exactly its size, buffered or streamed.
func TestBashLargeOutput(t *testing.T) {
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	x := &Exec{Workspace: ws, Env: []string{"PATH=" + os.Getenv("PATH")}, NoTripwire: true}
	// 300 000 bytes: "0123456789" repeated, across many pipe reads.
	const cmd = `i=0; while [ $i -lt 30000 ]; do printf 0123456789; i=$((i+1)); done; printf E >&2`
	want := strings.Repeat("0123456789", 30000)
	for _, c := range []struct {
		max       int64
		truncated bool
	}{{0, false}, {123457, true}, {int64(len(want)), false}} {
		r, err := x.Bash(context.Background(), wire.BashArgs{Command: cmd, MaxOutputBytes: c.max}, nil)
		if err != nil {
			t.Fatal(err)
		}
		w := want
		if c.truncated {
			w = want[:c.max]
		}
		if r.Stdout != w || r.StdoutTruncated != c.truncated || r.Stderr != "E" {
			t.Errorf("max %d: stdout %d bytes (want %d), truncated %v, stderr %q", c.max, len(r.Stdout), len(w), r.StdoutTruncated, r.Stderr)
		}
	}
	var got strings.Builder
	r, err := x.Bash(context.Background(), wire.BashArgs{Command: cmd, Stream: true}, func(stream string, data []byte) {
		if stream == "stdout" {
			got.Write(data)
		}
	})
	if err != nil || r.ExitCode != 0 || got.String() != want {
		t.Errorf("streamed: %v %+v, %d bytes", err, r, got.Len())
	}
}

// The tripwire's protected-path stats (protStats, which answers absent
// without a system call for a first component the Scan's listing of the
// workspace lacks, and for paths below an absent first component) answer
// exactly what fsguard.Tree.Stat does, whatever the first component is:
// absent, a directory, a file (gitdir), a link to a directory inside or
// outside, another case of the name (found by a case-folding file system's
// lookup, so never taken as absent), in a workspace with a non-ASCII name
// (no answer from the listing), in a nested repository; with and without a
// Scan.
func TestProtStatsAsTreeStat(t *testing.T) {
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(outside, "hooks"), 0o755)
	shapes := map[string]func(ws string){
		"empty": func(string) {},
		"git dir": func(ws string) {
			os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
			os.WriteFile(filepath.Join(ws, ".git", "config"), nil, 0o644)
			os.MkdirAll(filepath.Join(ws, ".config", "mise"), 0o755)
		},
		"gitdir file":  func(ws string) { os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: x\n"), 0o644) },
		"link outside": func(ws string) { os.Symlink(outside, filepath.Join(ws, ".git")) },
		"link inside": func(ws string) {
			os.MkdirAll(filepath.Join(ws, "real", "hooks"), 0o755)
			os.Symlink("real", filepath.Join(ws, ".git"))
			os.WriteFile(filepath.Join(ws, ".config"), nil, 0o644)
		},
		"present": func(ws string) {
			os.MkdirAll(filepath.Join(ws, ".vscode"), 0o755)
			os.WriteFile(filepath.Join(ws, ".envrc"), nil, 0o644)
			os.Symlink(outside, filepath.Join(ws, ".vak"))
			os.MkdirAll(filepath.Join(ws, ".config"), 0o755)
			os.WriteFile(filepath.Join(ws, ".config", "mise.toml"), nil, 0o644)
		},
		"other case": func(ws string) {
			os.MkdirAll(filepath.Join(ws, ".VSCode"), 0o755)
			os.MkdirAll(filepath.Join(ws, ".GIT", "hooks"), 0o755)
		},
		"non-ASCII name": func(ws string) {
			os.WriteFile(filepath.Join(ws, "caf\u00e9"), nil, 0o644)
			os.WriteFile(filepath.Join(ws, ".envrc"), nil, 0o644)
		},
		"nested repository": func(ws string) {
			os.MkdirAll(filepath.Join(ws, "sub", ".git", "hooks"), 0o755)
			os.MkdirAll(filepath.Join(ws, "sub2", ".git"), 0o755)
		},
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			ws, err := paths.CanonicalWorkspace(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			shape(ws)
			tr, sc := scanTree(t, ws)
			for _, ps := range []*protStats{{}, {scan: &sc}} {
				for _, rel := range fsguard.ExpandProtected(sandbox.DefaultProtected, sc.GitRoots()) {
					want, werr := tr.Stat(rel)
					got, gerr := ps.stat(tr, rel)
					if want != got || (werr == nil) != (gerr == nil) {
						t.Errorf("%s (scan %v): protStats %+v %v, Tree.Stat %+v %v", rel, ps.scan != nil, got, gerr, want, werr)
					}
				}
			}
		})
	}
}

// scanTree opens ws as a tree, closed when the test ends, and scans it as
// the tripwire's pass before a command does.
func scanTree(t *testing.T, ws string) (*fsguard.Tree, fsguard.Scan) {
	t.Helper()
	tr, err := fsguard.OpenTree(ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	sc, err := tr.Scan(false)
	if err != nil {
		t.Fatal(err)
	}
	return tr, sc
}

// An entry created after the Scan read the workspace directory is absent to
// protStats: its answer is what Tree.Stat said when the Scan listed the
// directory (the tripwire's doc says why that is harmless), and an entry
// removed since is absent, as Tree.Stat says now.
func TestProtStatsAnswerAsListed(t *testing.T) {
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, ".envrc"), nil, 0o644)
	tr, sc := scanTree(t, ws)
	listed := map[string]fsguard.Entry{}
	for _, rel := range []string{".vscode", ".config/mise"} {
		if listed[rel], err = tr.Stat(rel); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(ws, ".vscode"), 0o755)
	os.MkdirAll(filepath.Join(ws, ".config", "mise"), 0o755)
	os.Remove(filepath.Join(ws, ".envrc"))
	ps := protStats{scan: &sc}
	for rel, want := range listed {
		if got, err := ps.stat(tr, rel); err != nil || got != want {
			t.Errorf("%s created after the Scan: protStats %+v %v, want %+v as listed", rel, got, err, want)
		}
	}
	if got, err := ps.stat(tr, ".envrc"); err != nil || got.Kind != fsguard.Absent {
		t.Errorf(".envrc removed after the Scan: protStats %+v %v, want absent", got, err)
	}
}
