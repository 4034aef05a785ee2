package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"vak/internal/fsguard"
	"vak/internal/sandbox"
	"vak/internal/testenv"
)

// A protected path replaced between vak's check and the daemon's mount
// (which follows symlinks in mount sources): a concurrent command creates
// .vscode, the next command's plan protects it, and the first swaps it.
// Either the link stays at the path (the daemon mounts its target where
// the link points inside the container, and the command reads it through
// the link), or, swapped back in time, another directory is mounted at the
// path itself (here: the credential directory renamed into place, what a
// rename-exchange race leaves). Each is refused by MountCheck before the
// command runs, through the docker CLI (Wrap) and the Engine API (Runner),
// and the credential is never printed. Control: unswapped, the command
// runs and the path is read-only.
func TestProtectedMountSwap(t *testing.T) {
	link := func(t *testing.T, ws, secret string) {
		os.Rename(filepath.Join(ws, ".vscode"), filepath.Join(ws, ".vscode-old"))
		if err := os.Symlink(secret, filepath.Join(ws, ".vscode")); err != nil {
			t.Fatal(err)
		}
	}
	renamed := func(t *testing.T, ws, secret string) {
		os.Rename(filepath.Join(ws, ".vscode"), filepath.Join(ws, ".vscode-old"))
		if err := os.Rename(secret, filepath.Join(ws, ".vscode")); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		gvisor  bool // under gVisor (testenv.RequireGVisor)
		swap    func(t *testing.T, ws, secret string)
		refused bool
	}{
		{"control", false, nil, false},
		{"link", false, link, true},
		{"another directory at the path", false, renamed, true},
		{"link under gVisor", true, link, true},
	}
	for _, tc := range cases {
		for _, api := range []bool{false, true} {
			name := tc.name + "/cli"
			if api {
				name = tc.name + "/engine-api"
			}
			t.Run(name, func(t *testing.T) {
				bb := liveBackend(t)
				if tc.gvisor {
					bb.Runtime = testenv.RequireGVisor(t)
				}
				if api && !bb.RunsHere() {
					t.Skipf("the Engine API path is not taken here: %s", bb.CLIReason())
				}
				ws := workspace(t)
				secret := filepath.Join(filepath.Dir(ws), "secret-"+filepath.Base(ws))
				os.MkdirAll(secret, 0o755)
				t.Cleanup(func() { os.RemoveAll(secret) })
				os.WriteFile(filepath.Join(secret, "s"), []byte("CREDENTIAL"), 0o644)
				os.MkdirAll(filepath.Join(ws, ".vscode"), 0o777)
				os.WriteFile(filepath.Join(ws, ".vscode", "s"), []byte("good"), 0o644)
				prot, err := fsguard.PlanProtection(ws, sandbox.DefaultProtected)
				if err != nil {
					t.Fatal(err)
				}
				c := sandbox.Command{ID: fmt.Sprintf("swap%d%d", os.Getpid(), swapN.Add(1)),
					Shell: "cat .vscode/s; echo; (echo x > .vscode/w) 2>/dev/null && echo WROTE; echo ran", Workspace: ws, Mode: sandbox.WorkspaceWrite, Protection: prot}
				var out, errb bytes.Buffer
				code := runSwapped(t, bb, c, api, func() {
					if tc.swap != nil {
						tc.swap(t, ws, secret)
					}
				}, &out, &errb)
				if strings.Contains(out.String()+errb.String(), "CREDENTIAL") {
					t.Fatalf("the credential was read: exit %d, out %q, err %q", code, out.String(), errb.String())
				}
				if !tc.refused {
					if code != 0 || out.String() != "good\nran\n" {
						t.Fatalf("control: exit %d, out %q, err %q", code, out.String(), errb.String())
					}
					return
				}
				if code != 125 || strings.Contains(out.String(), "ran") || !strings.Contains(errb.String(), "is not the file vak checked") {
					t.Fatalf("a swapped mount: exit %d, out %q, err %q; want status 125 and MountCheck's refusal", code, out.String(), errb.String())
				}
			})
		}
	}
}

var swapN atomic.Int64

// runSwapped describes c's container, calls swap (the race's window: after
// vak's checks, before the daemon mounts), then runs it through the docker
// CLI or the Engine API, and returns the exit status.
func runSwapped(t *testing.T, b *Backend, c sandbox.Command, api bool, swap func(), stdout, stderr *bytes.Buffer) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lr, lw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer lw.Close()
	defer lr.Close()
	if api {
		run, err := b.Runner(c)
		if err != nil || run == nil {
			t.Fatalf("Runner: %v", err)
		}
		swap()
		code, err := run(ctx, lr, stdout, stderr)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	argv, err := b.Wrap(c)
	if err != nil {
		t.Fatal(err)
	}
	swap()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, lr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}
