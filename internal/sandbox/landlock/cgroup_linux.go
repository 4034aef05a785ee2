package landlock

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"vak/internal/sandbox"
)

// The kernel exempts the global root user from RLIMIT_NPROC, so when vak
// runs as root the process limit (and a total memory limit) come from a
// per-session cgroup instead. Both cgroup v2 (unified) and v1 (pids and
// memory hierarchies) are supported.

// cgroupPrefix names session cgroups: prefix + broker pid + "-" + random.
const cgroupPrefix = "vak-"

// cgroupRoot is where cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// Cgroup is a per-session cgroup (possibly one directory per v1 hierarchy).
type Cgroup struct {
	dirs []string
}

// NeedCgroup reports whether limits must come from a cgroup: only root is
// exempt from RLIMIT_NPROC.
func NeedCgroup() bool { return os.Geteuid() == 0 }

// NewCgroup creates a cgroup bounding the number of tasks and the memory of
// everything placed in it.
func NewCgroup(l sandbox.Limits) (*Cgroup, error) {
	l = l.WithDefaults()
	var b [6]byte
	rand.Read(b[:])
	name := cgroupPrefix + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	c := &Cgroup{}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		// Unified hierarchy: a child of our own cgroup.
		own, err := ownCgroup("")
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(cgroupRoot, own, name)
		if err := c.mk(dir, map[string]string{"pids.max": strconv.Itoa(l.Pids), "memory.max": strconv.FormatInt(l.Memory, 10)}); err != nil {
			c.Remove()
			return nil, err
		}
		return c, nil
	}
	own, err := ownCgroup("pids")
	if err != nil {
		return nil, err
	}
	if err := c.mk(filepath.Join(cgroupRoot, "pids", own, name), map[string]string{"pids.max": strconv.Itoa(l.Pids)}); err != nil {
		c.Remove()
		return nil, err
	}
	if own, err := ownCgroup("memory"); err == nil {
		if err := c.mk(filepath.Join(cgroupRoot, "memory", own, name), map[string]string{"memory.limit_in_bytes": strconv.FormatInt(l.Memory, 10)}); err != nil {
			c.Remove()
			return nil, err
		}
	}
	return c, nil
}

func (c *Cgroup) mk(dir string, settings map[string]string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	c.dirs = append(c.dirs, dir)
	for k, v := range settings {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
			return fmt.Errorf("cgroup: set %s: %w", k, err)
		}
	}
	return nil
}

// Add moves pid (and its future children) into the cgroup.
func (c *Cgroup) Add(pid int) error {
	for _, d := range c.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o600); err != nil {
			return fmt.Errorf("cgroup: add %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

// Remove deletes the cgroup. Call it after the worker exited; the kernel
// may still be reaping the sandbox's last processes, so it retries briefly.
func (c *Cgroup) Remove() {
	for i := len(c.dirs) - 1; i >= 0; i-- {
		for try := 0; try < 100; try++ {
			err := os.Remove(c.dirs[i])
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// ownCgroup returns this process's cgroup path in the hierarchy with the
// given controller ("" for the unified hierarchy).
func ownCgroup(controller string) (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller && controller != "" {
				return parts[2], nil
			}
		}
	}
	return "", errors.New("cgroup: no " + controller + " hierarchy for this process")
}

// cgroupUsable predicts whether NewCgroup can work here (for Probe) without
// creating anything: the parent directories exist and are writable. Creating
// the session's cgroup is the real test.
func cgroupUsable() error {
	var parents []string
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		own, err := ownCgroup("")
		if err != nil {
			return err
		}
		parents = append(parents, filepath.Join(cgroupRoot, own))
	} else {
		own, err := ownCgroup("pids")
		if err != nil {
			return err
		}
		parents = append(parents, filepath.Join(cgroupRoot, "pids", own))
	}
	for _, p := range parents {
		if err := unix.Access(p, unix.W_OK); err != nil {
			return fmt.Errorf("cgroup %s is not writable: %w", p, err)
		}
	}
	return nil
}

// CleanStaleCgroups removes session cgroups whose broker is gone (alive
// reports whether a pid exists). Only empty cgroups can be removed; the
// kernel refuses the others.
func CleanStaleCgroups(alive func(int) bool) []string {
	var parents []string
	if own, err := ownCgroup(""); err == nil {
		parents = append(parents, filepath.Join(cgroupRoot, own))
	}
	for _, c := range []string{"pids", "memory"} {
		if own, err := ownCgroup(c); err == nil {
			parents = append(parents, filepath.Join(cgroupRoot, c, own))
		}
	}
	var removed []string
	for _, parent := range parents {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
			pidStr, _, ok2 := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidStr)
			if !e.IsDir() || !ok || !ok2 || err != nil || alive(pid) {
				continue
			}
			p := filepath.Join(parent, e.Name())
			if os.Remove(p) == nil {
				removed = append(removed, p)
			}
		}
	}
	return removed
}
