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
