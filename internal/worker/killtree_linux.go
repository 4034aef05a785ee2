package worker

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var out []int
	for _, n := range names {
		p, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// contain anything: state ppid pgrp session ...
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if sess, _ := strconv.Atoi(f[3]); sess == sid {
			out = append(out, p)
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

// procInfo is one line of /proc/PID/stat.
type procInfo struct {
	pid, ppid, sid int
	state          byte
}

// procTable lists the processes visible in /proc.
func procTable() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procInfo, 0, len(names))
	for _, n := range names {
		p, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 4 || len(f[0]) != 1 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		sid, _ := strconv.Atoi(f[3])
		out = append(out, procInfo{pid: p, ppid: ppid, sid: sid, state: f[0][0]})
	}
	return out
}

// descendants lists the live (non-zombie) processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	live := map[int]bool{}
	for _, p := range procTable() {
		children[p.ppid] = append(children[p.ppid], p.pid)
		live[p.pid] = p.state != 'Z' && p.state != 'X'
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
