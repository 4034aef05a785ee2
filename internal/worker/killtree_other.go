//go:build !linux

package worker

import "syscall"

// killTree kills the command's process group. Without /proc there is no
// reliable way to find descendants that left the group; the process-scoped
// backends on these platforms end the whole worker instead.
func killTree(pid int, _ func(int) ([]int, error)) { syscall.Kill(-pid, syscall.SIGKILL) }

// killSubtree is killTree: only Linux has child subreapers.
func killSubtree(pid int) { killTree(pid, nil) }
