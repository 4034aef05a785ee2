// Command dockerrun measures what `vak run --backend docker` adds to a raw
// `docker run --rm` with the very same flags (taken from the backend's own
// Wrap, so the two containers are identical). Runs are interleaved so drift
// on the machine hits both contenders equally.
//
//	go run ./bench/dockerrun -n 40 -image vak-test:latest
//
// With -against BINARY, a second vak binary (e.g. one built from an older
// commit) runs the same command too, interleaved with the others, and its
// trace breakdown is printed as well: a before/after in one run.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"vak/bench/internal/stats"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
)

func main() {
	n := flag.Int("n", 40, "samples per contender")
	image := flag.String("image", "vak-test:latest", "image to run")
	against := flag.String("against", "", "another vak binary to run the same command with, interleaved (before/after)")
	flag.Parse()

	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	ws, _ := filepath.EvalSymlinks(os.TempDir())
	ws, err = os.MkdirTemp(ws, "vak-bench-ws-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(ws)
	cfg := filepath.Join(ws, "..", filepath.Base(ws)+".toml")
	os.WriteFile(cfg, []byte("version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \""+*image+"\"\n"), 0o600)
	defer os.Remove(cfg)

	b := docker.New(*image)
	raw := &stats.Sample{Name: "docker run --rm (same flags)"}
	viaVak := &stats.Sample{Name: "vak run --backend docker"}
	other := &stats.Sample{Name: "vak run --backend docker (" + *against + ")"}
	for i := -2; i < *n; i++ { // two warm-up rounds
		argv, err := b.Wrap(sandbox.Command{ID: fmt.Sprintf("bench%d", i+2), Shell: "true", Workspace: ws, Mode: sandbox.WorkspaceWrite})
		if err != nil {
			log.Fatal(err)
		}
		d1, err := stats.Time(func() error { return runWithLifeline(argv...) })
		if err != nil {
			log.Fatal(err)
		}
		d2, err := stats.Time(func() error {
			return stats.RunQuiet(vak, "--config", cfg, "run", "-w", ws, "--", "true")
		})
		if err != nil {
			log.Fatal(err)
		}
		if i >= 0 {
			raw.Add(d1)
			viaVak.Add(d2)
		}
		if *against != "" {
			d3, err := stats.Time(func() error {
				return stats.RunQuiet(*against, "--config", cfg, "run", "-w", ws, "--", "true")
			})
			if err != nil {
				log.Fatal(err)
			}
			if i >= 0 {
				other.Add(d3)
			}
		}
	}
	fmt.Printf("### vak run --backend docker vs docker run (%s/%s, %d cores, n=%d, interleaved)\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), *n)
	if *against != "" {
		fmt.Print(stats.Table(raw, viaVak, other))
	} else {
		fmt.Print(stats.Table(raw, viaVak))
	}
	fmt.Println()
	// Where vak's run goes (separate runs, after the timed ones).
	bd, err := stats.TraceBreakdown(min(*n, 10), vak, "--config", cfg, "run", "-w", ws, "--", "true")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(bd)
	if *against != "" {
		bd, err := stats.TraceBreakdown(min(*n, 10), *against, "--config", cfg, "run", "-w", ws, "--", "true")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("\n%s:\n\n%s", *against, bd)
	}
}

// runWithLifeline runs argv as vak's broker does: its stdin is a pipe whose
// write end stays open until the command exits (the wrap's lifeline; at
// end of input the container kills its processes).
func runWithLifeline(argv ...string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer w.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = r
	err = cmd.Start()
	r.Close()
	if err != nil {
		return err
	}
	return cmd.Wait()
}
