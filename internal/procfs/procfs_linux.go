package procfs

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// Stat reads one process.
func Stat(pid int) (Proc, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, err
	}
	return parse(pid, string(data))
}

// All lists the processes visible in /proc (those that vanish while it
// reads are skipped).
func All() []Proc {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]Proc, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, err := Stat(pid); err == nil {
			out = append(out, p)
		}
	}
	return out
}

var errMalformed = errors.New("procfs: malformed stat line")

// parse reads "pid (comm) state ppid pgrp session ...". The command name is
// in parentheses and may contain anything, spaces and ')' included, so the
// fields are taken after the last ')'.
func parse(pid int, s string) (Proc, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Proc{}, errMalformed
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return Proc{}, errMalformed
	}
	ppid, err1 := strconv.Atoi(f[1])
	sid, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil {
		return Proc{}, errMalformed
	}
	return Proc{PID: pid, PPID: ppid, SID: sid, State: f[0][0]}, nil
}
