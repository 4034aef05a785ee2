package sandboxtest

import (
	"bytes"
	"os"
	"strconv"

	"vak/internal/procfs"
)

// liveWith lists the live (not zombie) processes whose command line
// contains tag, as this test sees them (the sandbox's are on this host).
func liveWith(tag string) ([]int, error) {
	var pids []int
	for _, p := range procfs.All() {
		if !p.Live() || p.PID == os.Getpid() {
			continue
		}
		argv, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
		if err == nil && bytes.Contains(argv, []byte(tag)) {
			pids = append(pids, p.PID)
		}
	}
	return pids, nil
}
