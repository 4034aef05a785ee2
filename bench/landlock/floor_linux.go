package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"vak/internal/sandbox/landlock"
)

// notifyFloorSupported says whether the floor with vak's session tracking
// runs here (startNotifyFloor).
const notifyFloorSupported = true

// notifySetsid makes this process's setsid a user notification answered
// by its supervisor on landlock.SupervisorFD (landlock.NotifySetsid): the
// step of the landlock backend's session tracking that a command's start
// cannot skip, without the rest of its sandbox. The caller keeps what it
// returns (the socket to the supervisor) alive for as long as it serves,
// as the worker keeps its own: dropped, it is closed whenever the garbage
// collector finds it.
func notifySetsid() (keep any, err error) {
	return landlock.NotifySetsid()
}

// intoCgroup makes the command start in the cgroup of descriptor fd
// (clone3 with CLONE_INTO_CGROUP).
func intoCgroup(attr *syscall.SysProcAttr, fd int) {
	attr.UseCgroupFD, attr.CgroupFD = true, fd
}

// floorCgroup makes a cgroup v2 directory for the floor whose commands
// each start in a cgroup (startDesignFloors), under the first cgroup2
// mount: on this machine kind, a hybrid host, /sys/fs/cgroup/unified. It
// needs no controller: cgroup.kill and CLONE_INTO_CGROUP are the
// hierarchy's own. ok is false where none can be made here (no cgroup2
// mount, or not root and nothing delegated); remove removes it.
func floorCgroup() (dir string, remove func(), ok bool) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", nil, false
	}
	for line := range strings.Lines(string(mounts)) {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "cgroup2" {
			continue
		}
		dir = filepath.Join(f[1], "vak-bench-floor-"+strconv.Itoa(os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", nil, false
		}
		return dir, func() { os.Remove(dir) }, true
	}
	return "", nil, false
}
