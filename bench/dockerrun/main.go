// Command dockerrun measures what `vak run --backend docker` adds to a raw
// `docker run --rm` with the very same flags (taken from the backend's own
// Wrap, so the two containers are identical). Runs are interleaved so drift
// on the machine hits both contenders equally.
//
//	go run ./bench/dockerrun -n 40 -image vak-test:latest
//
// The ratio of the medians comes with its 95% bootstrap interval (rounds
// resampled in pairs) and where it stands against -target (1.03): met,
// missed, or undecided while the interval holds the target. With -max-n
// above -n, rounds are added 20 at a time until the interval decides or
// -max-n rounds ran:
//
//	go run ./bench/dockerrun -n 60 -max-n 400 -image vak-test:latest
//
// With -runtime NAME both contenders run under that runtime (e.g. runsc,
// gVisor: vak's sandbox.runtime against docker run --runtime):
//
//	go run ./bench/dockerrun -n 40 -runtime runsc -image vak-test:latest
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
	"time"

	"vak/bench/internal/stats"
	"vak/internal/sandbox"
	"vak/internal/sandbox/docker"
)

func main() {
	n := flag.Int("n", 40, "samples per contender")
	maxN := flag.Int("max-n", 0, "add rounds, 20 at a time, until the ratio's interval decides against -target or this many ran (default: -n, no more)")
	target := flag.Float64("target", 1.03, "the target ratio of vak's median to raw docker run's")
	image := flag.String("image", "vak-test:latest", "image to run")
	rt := flag.String("runtime", "", "the OCI runtime of both contenders' containers (default: the Engine's)")
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
	conf := "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"" + *image + "\"\n"
	if *rt != "" {
		conf += "runtime = \"" + *rt + "\"\n"
	}
	os.WriteFile(cfg, []byte(conf), 0o600)
	defer os.Remove(cfg)
	b := docker.New(*image)
	b.Runtime = *rt
	under := ""
	if *rt != "" {
		under = " --runtime " + *rt
	}

	r := &rounds{
		b:       b,
		ws:      ws,
		cfg:     cfg,
		vak:     vak,
		against: *against,
		raw:     &stats.Sample{Name: "docker run --rm" + under + " (same flags)"},
		viaVak:  &stats.Sample{Name: "vak run --backend docker" + under},
		other:   &stats.Sample{Name: "vak run --backend docker (" + *against + ")"},
	}
	for i := -2; i < 0; i++ { // two warm-up rounds
		r.run(false)
	}
	for range *n {
		r.run(true)
	}
	iv := stats.MustInterval(r.raw, r.viaVak)
	for iv.Versus(*target) == "undecided" && len(r.raw.D) < *maxN {
		log.Printf("%d rounds: %v holds the target %.3f×; 20 more", len(r.raw.D), iv, *target)
		for range min(20, *maxN-len(r.raw.D)) {
			r.run(true)
		}
		iv = stats.MustInterval(r.raw, r.viaVak)
	}
	*n = len(r.raw.D)
	raw, viaVak, other := r.raw, r.viaVak, r.other
	fmt.Printf("### vak run --backend docker%s vs docker run%s (%s/%s, %d cores, n=%d, interleaved)\n\n", under, under, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), *n)
	if *against != "" {
		fmt.Print(stats.Table(raw, viaVak, other))
	} else {
		fmt.Print(stats.Table(raw, viaVak))
	}
	fmt.Printf("\nvak run --backend docker vs docker run, ratio of medians: %v; target ≤ %.3f×: **%s**\n\n", iv, *target, iv.Versus(*target))
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

// rounds runs the contenders of one round, interleaved, and keeps their
// times.
type rounds struct {
	b                  *docker.Backend
	ws, cfg, vak       string
	against            string
	raw, viaVak, other *stats.Sample
	i                  int
}

func (r *rounds) run(keep bool) {
	r.i++
	argv, err := r.b.Wrap(sandbox.Command{ID: fmt.Sprintf("bench%d", r.i), Shell: "true", Workspace: r.ws, Mode: sandbox.WorkspaceWrite})
	if err != nil {
		log.Fatal(err)
	}
	d1 := stats.MustTime(func() error { return runWithLifeline(argv...) })
	// With -against, the two vak binaries take turns going first: in a
	// fixed order the one run second can come out faster for that alone
	// (bench/landlock's warm before/after did, by 3-6 %).
	var d2, d3 time.Duration
	if r.against != "" && r.i%2 == 0 {
		d3 = r.timeVak(r.against)
	}
	d2 = r.timeVak(r.vak)
	if r.against != "" && r.i%2 != 0 {
		d3 = r.timeVak(r.against)
	}
	if keep {
		r.raw.Add(d1)
		r.viaVak.Add(d2)
		if r.against != "" {
			r.other.Add(d3)
		}
	}
}

// timeVak times `vak run -- true` with the vak binary bin.
func (r *rounds) timeVak(bin string) time.Duration {
	return stats.MustTime(func() error {
		return stats.RunQuiet(bin, "--config", r.cfg, "run", "-w", r.ws, "--", "true")
	})
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
