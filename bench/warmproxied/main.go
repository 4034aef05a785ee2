// Command warmproxied measures a warm `vak run --backend docker --network
// proxied -- true` (the workspace's proxied topology kept up between runs,
// session.run_network_idle) against `vak run --backend docker --network none
// -- true` with the same image. One cold proxied run first creates the
// topology; runs then alternate. A last run with run_network_idle = "0"
// removes the topology. vak's state dir is private to the run.
//
//	go run ./bench/warmproxied -n 20 -image vak-test:latest
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"vak/bench/internal/stats"
)

func main() {
	n := flag.Int("n", 20, "runs per contender")
	image := flag.String("image", "vak-test:latest", "image to run")
	flag.Parse()
	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	dir, err := os.MkdirTemp(tmp, "vak-bench-warmproxied-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		log.Fatal(err)
	}
	os.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	config := func(name, idle string) string {
		p := filepath.Join(dir, name)
		data := "version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \"" + *image + "\"\n" +
			"[network]\npresets = [\"npm\"]\n[session]\nrun_network_idle = \"" + idle + "\"\n"
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			log.Fatal(err)
		}
		return p
	}
	warm, cleanup := config("warm.toml", "10m"), config("cleanup.toml", "0")
	run := func(cfg, network string) error {
		return stats.RunQuiet(vak, "--config", cfg, "run", "--label", "vak.bench=1", "-w", ws, "--network", network, "--", "true")
	}
	defer func() {
		if err := run(cleanup, "proxied"); err != nil {
			log.Printf("removing the topology: %v", err)
		}
	}()
	cold, err := stats.Time(func() error { return run(warm, "proxied") })
	if err != nil {
		log.Print(err)
		return
	}
	none := &stats.Sample{Name: "vak run --backend docker --network none -- true"}
	proxied := &stats.Sample{Name: "vak run --backend docker --network proxied -- true (warm)"}
	for i := -1; i < *n; i++ { // one warm-up round
		d1, err := stats.Time(func() error { return run(warm, "none") })
		if err != nil {
			log.Print(err)
			return
		}
		d2, err := stats.Time(func() error { return run(warm, "proxied") })
		if err != nil {
			log.Print(err)
			return
		}
		if i >= 0 {
			none.Add(d1)
			proxied.Add(d2)
		}
	}
	fmt.Printf("cold proxied run (creates the topology): %v\n\n", cold.Round(1e6))
	fmt.Print(stats.Table(none, proxied))
}
