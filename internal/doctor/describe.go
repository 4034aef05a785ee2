package doctor

import (
	"errors"
	"fmt"
	"os"

	"vak/internal/agenthome"
	"vak/internal/config"
	"vak/internal/fsguard"
	"vak/internal/keeper"
	"vak/internal/launch"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
)

// describeLimits says, per limit, its value and what enforces it with the
// effective backend b (sandbox.LimitsDescriber).
func describeLimits(cfg *config.Config, b sandbox.Backend) []string {
	l := cfg.Sandbox.Limits.WithDefaults()
	if !cfg.Sandbox.Mode.Restricted() {
		return []string{"none (mode full-access: nothing is sandboxed)"}
	}
	if d, ok := b.(sandbox.LimitsDescriber); ok {
		return d.DescribeLimits(l)
	}
	return []string{fmt.Sprintf("memory %d MiB, cpus %g, pids %d, tmp %d MiB (the %s backend does not say how it enforces them)", l.Memory>>20, l.CPUs, l.Pids, l.TmpfsSize>>20, b.Name())}
}

// describeTripwire says how a long-lived worker checks the workspace
// around each command, and the landlock broker around a run: kept current
// with inotify, a ledger or a keeper, or walked every time.
func describeTripwire(ws string) string {
	if err := fsguard.CheckWatch(ws); err != nil {
		return fmt.Sprintf("every command walks the workspace (no inotify watch: %v)", err)
	}
	keep := "none runs for this workspace now"
	if pid, err := keeper.Running(ws); err != nil {
		keep = err.Error()
	} else if pid > 0 {
		keep = fmt.Sprintf("pid %d runs for this workspace", pid)
	} else if pid < 0 {
		keep = "one is building its watch of this workspace"
	}
	return fmt.Sprintf("the checks around a command look only at what changed: a landlock session's workspace watcher and a container session's worker keep an inotify watch (up to %d directories and hard-linked files: a quarter of fs.inotify.max_user_watches); a vak run checks the workspace's ledger (a stat per directory), or in a workspace of %d directories or more asks its keeper (vak __keep-watch: %s)", fsguard.WatchLimit(), keeper.MinDirs, keep)
}

// describeHome says which HOME a run would get: the choice, where it lives
// on the host and what it holds (nothing is created to say so).
func describeHome(cfg *config.Config, ws string, b sandbox.Name) string {
	h := cfg.Sandbox.Home
	switch {
	case !cfg.Sandbox.Mode.Restricted() || b == sandbox.None:
		return "your real home (mode full-access: nothing is sandboxed)"
	case h.Kind == agenthome.Fresh:
		return "fresh (an empty private home for each run)"
	case ws == "" && h.Kind == agenthome.Workspace:
		return h.String() + " (no usable workspace)"
	}
	home, _ := os.UserHomeDir()
	if err := launch.HomeTargetProblem(b, home); err != nil {
		if !cfg.Sandbox.HomeSet {
			return fmt.Sprintf("fresh (the default %s home cannot be placed: HOME is %q, one of the sandbox's own directories)", h, home)
		}
		return fmt.Sprintf("%s: runs fail: %v", h, err)
	}
	dir, err := agenthome.Dir(h, ws)
	if err != nil {
		return fmt.Sprintf("%s: %v", h, err)
	}
	seen := ""
	if b == sandbox.Docker {
		seen = ", seen as " + docker.PersistentHome + " in the container"
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("%s, kept in %s (not created yet%s)", h, dir, seen)
	case err != nil:
		return fmt.Sprintf("%s, kept in %s: %v", h, dir, err)
	case !fi.IsDir():
		return fmt.Sprintf("%s, kept in %s: not a directory (runs fail until it is removed)", h, dir)
	}
	u, err := (agenthome.Home{Choice: h, Dir: dir}).Usage()
	if err != nil {
		return fmt.Sprintf("%s, kept in %s (size unknown: %v%s)", h, dir, err, seen)
	}
	return fmt.Sprintf("%s, kept in %s (%s in %d entries%s)", h, dir, u.Human(), u.Entries, seen)
}
