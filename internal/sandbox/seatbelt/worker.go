package seatbelt

import (
	"context"
	"os/exec"
	"path/filepath"

	"vak/internal/paths"
	"vak/internal/sandbox"
)

// WorkerDescription is what a Seatbelt-contained worker reports in its
// ready event.
const WorkerDescription = "seatbelt: sandbox-exec with a generated deny-by-default profile"

func init() {
	// sandbox-exec contains the worker from outside; the worker itself has
	// nothing left to do.
	sandbox.RegisterWorker(string(sandbox.Seatbelt), sandbox.DescribeWorker(WorkerDescription))
}

var (
	_ sandbox.ProcessBackend  = (*Backend)(nil)
	_ sandbox.LimitsDescriber = (*Backend)(nil)
)

// DescribeLimits implements sandbox.LimitsDescriber: sandbox-exec bounds
// no resource, and PrepareWorker sets none.
func (*Backend) DescribeLimits(l sandbox.Limits) []string {
	const none = "NOT enforced (the seatbelt backend sets no resource limits)"
	return sandbox.LimitLines(l, none, none, none, "NOT enforced (the private temp dir is a directory on the disk)")
}

// PrepareWorker implements sandbox.ProcessBackend: cmd becomes sandbox-exec
// running the worker under the profile for pp, with vak's config and state
// directories denied and, as HOME, an empty private directory inside the
// temp dir or the persistent home (pp.AgentHome).
func (b *Backend) PrepareWorker(ctx context.Context, pp sandbox.ProcessPolicy, cmd *exec.Cmd) (*sandbox.WorkerLaunch, error) {
	if err := sandbox.RefuseNetwork(b, pp.Network); err != nil {
		return nil, err
	}
	var deny []string
	for _, d := range []func() (string, error){paths.ConfigDir, paths.StateDir} {
		if p, err := d(); err == nil {
			deny = append(deny, p)
		}
	}
	p := Policy{
		Workspace:  pp.Workspace,
		Mode:       pp.Mode,
		TempDir:    pp.TempDir,
		UserHome:   pp.UserHome,
		ReadPaths:  pp.ReadPaths,
		WritePaths: pp.WritePaths,
		Protected:  pp.Protected, // by name: the profile protects what does not exist yet too
		Deny:       deny,
		AgentHome:  pp.AgentHome,
	}
	sb, err := Command(context.Background(), p, cmd.Args)
	if err != nil {
		return nil, err
	}
	cmd.Path, cmd.Args = sb.Path, sb.Args
	home := filepath.Join(pp.TempDir, PrivateHome)
	if pp.AgentHome != "" {
		home = pp.AgentHome
	}
	env := append(append([]string(nil), pp.Env...), "HOME="+home, "TMPDIR="+pp.TempDir)
	return &sandbox.WorkerLaunch{Env: env}, nil
}
