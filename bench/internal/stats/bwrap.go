package stats

import "os/exec"

// Bwrap is bubblewrap around cmd with the kind of view vak's landlock
// backend builds: every namespace new, the root read-only, the workspace
// ws writable, new /dev, /proc and /tmp (ws is bound after /tmp's tmpfs,
// so a workspace under /tmp stays visible), a new session, killed with its
// parent. It returns nil when bwrap is not installed.
func Bwrap(ws string, cmd ...string) []string {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return nil
	}
	return append([]string{bin, "--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
		"--bind", ws, ws, "--chdir", ws, "--"}, cmd...)
}
