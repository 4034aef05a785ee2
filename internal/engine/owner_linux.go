package engine

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// OwnerToken names process pid so that it cannot be confused with a later
// process that reuses the PID: "BOOTID/PID/STARTTIME" (start time in clock
// ticks since boot, from /proc/PID/stat).
func OwnerToken(pid int) (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("owner: boot id: %w", err)
	}
	start, err := procStart(pid)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(boot)) + "/" + strconv.Itoa(pid) + "/" + start, nil
}

// OwnerAlive reports whether the process a token names still runs. known is
// false when the token cannot be judged here (another boot or machine is
// never taken as "gone": gc only removes what it is sure about).
func OwnerAlive(token string) (alive, known bool) {
	f := strings.Split(token, "/")
	if len(f) != 3 {
		return false, false
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || strings.TrimSpace(string(boot)) != f[0] {
		// Another boot: every process of that boot is gone, but the daemon
		// may serve several machines; only the boot we know is judged.
		return false, false
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil {
		return false, false
	}
	start, err := procStart(pid)
	if err != nil {
		return false, true
	}
	return start == f[2], true
}

func procStart(pid int) (string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", fmt.Errorf("owner: process %d: %w", pid, err)
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", fmt.Errorf("owner: process %d: malformed stat", pid)
	}
	// After the command: state(3) ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime(22).
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return "", fmt.Errorf("owner: process %d: malformed stat", pid)
	}
	return fields[19], nil
}
