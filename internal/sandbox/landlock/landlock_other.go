//go:build !linux

package landlock

import (
	"context"
	"os"
	"os/exec"

	"vak/internal/sandbox"
)

// Backend is the Landlock backend; on this platform it is never available.
type Backend struct{ AllowWeaker bool }

// Name implements sandbox.Backend.
func (*Backend) Name() string { return string(sandbox.Landlock) }

// Scope implements sandbox.Backend.
func (*Backend) Scope() sandbox.Scope { return sandbox.ScopeProcess }

// Available implements sandbox.Backend.
func (*Backend) Available(context.Context) error { return ErrUnsupported }

// Status reports what the kernel offers: nothing here.
func (*Backend) Status() Status { return Probe(false) }

// StatusFor reports what the kernel offers: nothing here.
func (*Backend) StatusFor(bool) Status { return Probe(false) }

// Probe reports what the kernel offers.
func Probe(bool) Status { return Status{Problem: ErrUnsupported.Error()} }

// Configure is unsupported here.
func Configure(*exec.Cmd, Status) (bool, error) { return false, ErrUnsupported }

// Stage1 is unsupported here.
func Stage1(Policy, []byte, []string, FenceServer) (int, error) { return 0, ErrUnsupported }

// Stage2 is unsupported here.
func Stage2(Policy, bool) (sandbox.WorkerOutcome, error) {
	return sandbox.WorkerOutcome{}, ErrUnsupported
}

// Cgroup is unsupported here.
type Cgroup struct{}

// NeedCgroup is false here.
func NeedCgroup() bool { return false }

func (*Backend) sessionCgroup(sandbox.Limits) (*Cgroup, error) { return nil, ErrUnsupported }

// DescribeLimits implements sandbox.LimitsDescriber: nothing is enforced
// here.
func (*Backend) DescribeLimits(sandbox.Limits) []string {
	return []string{"NOT enforced: " + ErrUnsupported.Error()}
}

// Add is unsupported here.
func (*Cgroup) Add(int) error { return ErrUnsupported }

// Remove does nothing here.
func (*Cgroup) Remove() {}

// CleanStaleCgroups does nothing here.
func CleanStaleCgroups(func(int) bool) []string { return nil }

// SupervisorPair is unsupported here.
func SupervisorPair() (*os.File, *os.File, error) { return nil, nil, ErrUnsupported }

// Supervise does nothing here.
func Supervise(*os.File, int) {}

// FenceNetwork implements sandbox.FenceProvider: never here.
func (*Backend) FenceNetwork() error { return ErrUnsupported }

func openPath(string) (*os.File, error) { return nil, ErrUnsupported }
