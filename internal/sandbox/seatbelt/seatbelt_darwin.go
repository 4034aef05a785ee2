//go:build darwin

package seatbelt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"vak/internal/sandbox"
)

// probePolicy is the policy of the availability probe. Its paths need not
// exist: the probe checks that sandbox-exec runs and that this macOS
// compiles the profiles vak writes, including every computed rule.
var probePolicy = Policy{
	Workspace: "/private/var/empty",
	Mode:      sandbox.WorkspaceWrite,
	TempDir:   "/private/var/empty",
	UserHome:  "/Users/vak-probe",
	Protected: []string{"probe"},
	Deny:      []string{"/Users/vak-probe/.config/vak"},
}

// Backend is the Seatbelt backend: process-scoped, it confines the whole
// worker, which the launcher starts with Command. The zero value is ready to
// use.
type Backend struct {
	mu     sync.Mutex
	probed bool  // a probe ran to completion
	err    error // its result
}

// Available implements sandbox.Backend: sandbox-exec must exist and run
// /usr/bin/true under a profile vak generates, so a profile this version of
// macOS cannot compile is reported here rather than on the first command.
// The result is cached, except when ctx ended the probe early.
func (b *Backend) Available(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probed {
		return b.err
	}
	err := probe(ctx)
	if err != nil && ctx.Err() != nil {
		return err
	}
	b.probed, b.err = true, err
	return err
}

func probe(ctx context.Context) error {
	if _, err := os.Stat(SandboxExec); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	prof, err := Profile(probePolicy)
	if err != nil {
		return fmt.Errorf("%w: probe profile: %v", ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, SandboxExec, "-p", prof, "--", "/usr/bin/true").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s cannot apply vak's profile: %v: %s", ErrUnavailable, SandboxExec, err, bytes.TrimSpace(out))
	}
	return nil
}

// Command returns the command that runs argv under sandbox-exec with the
// profile for p. The policy is canonicalized first (see Canonicalize), and
// when argv[0] is absolute the executable itself is added to the read
// grants, since the worker binary may live under the closed home directory
// (~/go/bin/vak).
//
// The command's directory is the workspace. Its environment is never nil, so
// the host environment is not inherited by accident: it holds TMPDIR (the
// temp dir) and HOME, an empty private directory PrivateHome inside the
// temp dir, created here. The real home is unreadable in the sandbox, and
// tools that find it so fail (git dies on EPERM from ~/.gitconfig) where an
// empty home is merely new, which is also what the Landlock backend shows.
// The launcher appends its scrubbed environment (a later HOME or TMPDIR
// wins) and sets process-group handling.
func Command(ctx context.Context, p Policy, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, ErrNoCommand
	}
	cp, err := Canonicalize(p)
	if err != nil {
		return nil, err
	}
	if filepath.IsAbs(argv[0]) {
		exe, err := resolve(argv[0])
		if err != nil {
			return nil, err
		}
		cp.ReadPaths = append(cp.ReadPaths, exe)
	}
	prof, err := Profile(cp)
	if err != nil {
		return nil, err
	}
	home := filepath.Join(cp.TempDir, PrivateHome)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("seatbelt: private home: %w", err)
	}
	args := append([]string{"-p", prof, "--"}, argv...)
	cmd := exec.CommandContext(ctx, SandboxExec, args...)
	cmd.Dir = cp.Workspace
	cmd.Env = []string{"HOME=" + home, "TMPDIR=" + cp.TempDir}
	return cmd, nil
}
