package worker

import (
	"syscall"
	"time"

	"vak/internal/procfs"
)

// killTree kills every process in the session led by pid (commands start
// with setsid, and the landlock backend's seccomp filter forbids setsid, so
// no descendant can leave the session), plus its process group for the
// unrestricted backends. It repeats until the session is empty, so processes
// forked during the kill die too.
func killTree(pid int) {
	syscall.Kill(-pid, syscall.SIGKILL)
	for i := 0; i < 50; i++ {
		n := 0
		for _, p := range sessionMembers(pid) {
			syscall.Kill(p, syscall.SIGKILL)
			n++
		}
		if n == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sessionMembers lists live (non-zombie) processes whose session id is sid.
func sessionMembers(sid int) []int {
	var out []int
	for _, p := range procfs.All() {
		if p.SID == sid && p.Live() {
			out = append(out, p.PID)
		}
	}
	return out
}

// killSubtree kills every descendant of pid, found through parent links,
// then pid's session and pid itself. pid is the reap shim, a child
// subreaper: orphans of its tree are re-parented to it, so a process that
// left the session (setsid, double fork) is still below it. Descendants die
// before pid so that none is orphaned past it during the kill; the loop
// repeats until none is left, catching processes forked meanwhile.
func killSubtree(pid int) {
	for i := 0; i < 100; i++ {
		d := descendants(pid)
		if len(d) == 0 {
			break
		}
		for _, p := range d {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
	killTree(pid)
}

// descendants lists the live (non-zombie) processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	live := map[int]bool{}
	for _, p := range procfs.All() {
		children[p.PPID] = append(children[p.PPID], p.PID)
		live[p.PID] = p.Live()
	}
	var out []int
	queue := []int{pid}
	seen := map[int]bool{pid: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if seen[c] {
				continue
			}
			seen[c] = true
			queue = append(queue, c)
			if live[c] {
				out = append(out, c)
			}
		}
	}
	return out
}
