package worker

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"vak/internal/procfs"
)

// killTree kills every process in the session led by pid (commands start
// with setsid) and in the sessions its processes made (sessions, if set,
// names them all, the sandbox having recorded each new session's origin:
// landlock's setsid supervisor), plus its process group for the
// unrestricted backends. It repeats until none of these sessions has a
// process left and no session joined them meanwhile, so processes forked
// and sessions made during the kill die too.
func killTree(pid int, sessions func(root int) ([]int, error)) {
	syscall.Kill(-pid, syscall.SIGKILL)
	list := func() map[int]bool {
		sids := map[int]bool{pid: true}
		if sessions == nil {
			return sids
		}
		more, err := sessions(pid)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vak: worker: killing command %d: %v\n", pid, err)
		}
		for _, s := range more {
			sids[s] = true
		}
		return sids
	}
	for i := 0; i < 50; i++ {
		sids := list()
		n := 0
		for _, p := range procfs.All() {
			if sids[p.SID] && p.Live() {
				syscall.Kill(p.PID, syscall.SIGKILL)
				n++
			}
		}
		if n == 0 && (sessions == nil || subset(list(), sids)) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// subset says whether every key of a is in b.
func subset(a, b map[int]bool) bool {
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
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
	killTree(pid, nil)
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
