// Command peers times `true` in a fresh workspace under vak and under what
// a user would pick instead, side by side in one interleaved run:
//
//   - the floor: exec of `true`, no sandbox at all;
//   - general sandboxes from Debian: bubblewrap (with namespaces and the
//     same kind of mounts as vak's view: the root read-only, the workspace
//     writable, new /dev, /proc and /tmp) and firejail (no profile, no
//     network, the root read-only, the workspace writable);
//   - the agent sandboxes: `vak run` (the landlock backend), Codex's
//     `codex sandbox` in workspace-write mode, and Anthropic's sandbox
//     runtime `srt` with the workspace writable and no domain allowed;
//   - containers, with -image: raw `docker run --rm --network none` with the
//     workspace mounted, and `vak run --backend docker`.
//
// Each contender runs sequentially (-n rounds, one command at a time, the
// contenders' order rotating every round) and in bursts (-burst N copies
// started at once, -burst-rounds times), and the bench prints median, p95,
// p99 and the success rate of each, plus whether the contender kept a write
// outside the workspace from reaching the host (a containment check run
// once before timing, so a contender that is fast because it confines
// nothing shows as such).
//
//	bench/peers/install.sh            # the pinned peers (Debian and npm)
//	go run ./bench/peers -n 30 -burst 8 -image vak-test:latest
//
// A peer that is not installed is skipped with the reason printed; the npm
// peers are looked for in -peers (install.sh's prefix) and then on PATH.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"vak/bench/internal/stats"
	"vak/internal/paths"
)

func main() {
	n := flag.Int("n", 30, "sequential rounds (one command of every contender per round)")
	burst := flag.Int("burst", 8, "commands started at once in a burst (0: no bursts)")
	burstRounds := flag.Int("burst-rounds", 5, "bursts per contender")
	vakBin := flag.String("vak", "", "a built vak binary to measure (default: build cmd/vak of this tree)")
	peersDir := flag.String("peers", defaultPeersDir(), "npm prefix holding codex and srt (bench/peers/install.sh)")
	image := flag.String("image", "", "a local Docker image for the container contenders (empty: skip them)")
	files := flag.Int("files", 0, "fill the workspace with this many files (and a .git directory) first")
	only := flag.String("only", "", "comma-separated contender keys to run (default: all available)")
	flag.Parse()

	vak, built, err := stats.Vak(*vakBin)
	if err != nil {
		log.Fatal(err)
	}
	defer built()
	env, err := newEnv(vak, *peersDir, *image, *files)
	if err != nil {
		log.Fatal(err)
	}
	defer env.close()

	var run []*contender
	for _, c := range env.contenders() {
		if *only != "" && !contains(*only, c.key) {
			continue
		}
		if c.skip != "" {
			fmt.Fprintf(os.Stderr, "skipped %s: %s\n", c.name, c.skip)
			continue
		}
		run = append(run, c)
	}
	for _, c := range run {
		c.contained = env.containment(c)
	}
	sequential(run, *n, env)
	if *burst > 0 {
		bursts(run, *burst, *burstRounds, env)
	}
	fmt.Printf("### `true` in a fresh workspace (%s/%s, %d cores, uid %d, %d files, n=%d sequential, %d bursts of %d, interleaved)\n\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), os.Getuid(), *files, *n, *burstRounds, *burst)
	fmt.Print(table(run, *burst > 0))
	for _, c := range run {
		if c.firstErr != "" {
			fmt.Printf("\n%s failed at least once: %s\n", c.name, c.firstErr)
		}
	}
}

// defaultPeersDir is install.sh's prefix: $VAK_PEERS, else /opt/vak-peers.
func defaultPeersDir() string {
	if d := os.Getenv("VAK_PEERS"); d != "" {
		return d
	}
	return "/opt/vak-peers"
}

func contains(list, key string) bool {
	for _, k := range strings.Split(list, ",") {
		if strings.TrimSpace(k) == key {
			return true
		}
	}
	return false
}

// workspace makes a fresh, canonical workspace under the temp dir.
func workspace(files int) (root, ws string, err error) {
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	if root, err = os.MkdirTemp(tmp, "vak-bench-peers-"); err != nil {
		return "", "", err
	}
	// Readable by everyone: bubblewrap's and srt's sandboxes, and the
	// container, see the workspace as another user may.
	if err = os.Chmod(root, 0o755); err != nil {
		return "", "", err
	}
	dir := filepath.Join(root, "ws")
	if err = os.Mkdir(dir, 0o777); err != nil {
		return "", "", err
	}
	if ws, err = paths.CanonicalWorkspace(dir); err != nil {
		return "", "", err
	}
	if files > 0 {
		err = stats.Fill(ws, files)
	}
	return root, ws, err
}
