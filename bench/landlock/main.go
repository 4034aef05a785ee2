// Command landlock measures the per-command cost of vak's native sandbox,
// side by side and interleaved:
//
//   - cold: `vak run --backend landlock -- true` (a whole vak process: config,
//     namespaces, view, Landlock, seccomp, the command) vs exec of `true`;
//
//   - warm: a bash request for `true` on a running landlock worker (the
//     protocol round trip, setsid answered by stage 1) vs os/exec of `true`
//     from Go.
//
//     go run ./bench/landlock -n 200
//
// With -against BINARY, a second vak binary (e.g. one built from an older
// commit) runs the cold contender too, interleaved with the others, and
// its trace breakdown is printed as well: a before/after in one run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"vak/bench/internal/stats"
	"vak/internal/broker"
	"vak/internal/config"
	"vak/internal/paths"
	"vak/internal/sandbox/landlock"
	"vak/internal/worker/wire"
)

func main() {
	n := flag.Int("n", 200, "samples per contender")
	against := flag.String("against", "", "another vak binary to run the cold contender with, interleaved (before/after)")
	flag.Parse()
	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	tmp, _ := filepath.EvalSymlinks(os.TempDir())
	dir, err := os.MkdirTemp(tmp, "vak-bench-ws-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ws, err := paths.CanonicalWorkspace(dir)
	if err != nil {
		log.Fatal(err)
	}
	cfgFile := dir + ".toml"
	os.WriteFile(cfgFile, []byte("version = 1\n[sandbox]\nbackend = \"landlock\"\n"), 0o600)
	defer os.Remove(cfgFile)
	truePath, _ := exec.LookPath("true")

	bare := &stats.Sample{Name: "exec true"}
	cold := &stats.Sample{Name: "vak run --backend landlock -- true"}
	other := &stats.Sample{Name: "vak run --backend landlock -- true (" + *against + ")"}
	for i := -3; i < *n; i++ {
		d1, err := stats.Time(func() error { return exec.Command(truePath).Run() })
		if err != nil {
			log.Fatal(err)
		}
		d2, err := stats.Time(func() error { return stats.RunQuiet(vak, "--config", cfgFile, "run", "-w", ws, "--", "true") })
		if err != nil {
			log.Fatal(err)
		}
		if i >= 0 {
			bare.Add(d1)
			cold.Add(d2)
		}
		if *against != "" {
			d3, err := stats.Time(func() error { return stats.RunQuiet(*against, "--config", cfgFile, "run", "-w", ws, "--", "true") })
			if err != nil {
				log.Fatal(err)
			}
			if i >= 0 {
				other.Add(d3)
			}
		}
	}

	cfg := config.Default()
	sess, err := broker.Start(context.Background(), broker.Options{Config: cfg, Workspace: ws, Backend: &landlock.Backend{}, Executable: vak})
	if err != nil {
		log.Fatal(err)
	}
	defer sess.Close()
	goExec := &stats.Sample{Name: "os/exec true (Go)"}
	warm := &stats.Sample{Name: "warm worker: bash true"}
	ctx := context.Background()
	for i := -10; i < *n; i++ {
		d1, err := stats.Time(func() error { return exec.Command(truePath).Run() })
		if err != nil {
			log.Fatal(err)
		}
		d2, err := stats.Time(func() error {
			r, err := sess.Bash(ctx, wire.BashArgs{Command: "true"}, nil)
			if err == nil && r.ExitCode != 0 {
				err = fmt.Errorf("exit %d", r.ExitCode)
			}
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		if i >= 0 {
			goExec.Add(d1)
			warm.Add(d2)
		}
	}
	fmt.Printf("### landlock backend (%s/%s, %d cores, n=%d, interleaved; %s)\n\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), *n, sess.Ready().Sandbox)
	if *against != "" {
		fmt.Print(stats.Table(bare, cold, other))
	} else {
		fmt.Print(stats.Table(bare, cold))
	}
	fmt.Println()
	// Where the cold run's time goes (separate runs, after the timed ones).
	bd, err := stats.TraceBreakdown(min(*n, 30), vak, "--config", cfgFile, "run", "-w", ws, "--", "true")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(bd)
	fmt.Println()
	if *against != "" {
		bd, err := stats.TraceBreakdown(min(*n, 30), *against, "--config", cfgFile, "run", "-w", ws, "--", "true")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s:\n\n%s\n", *against, bd)
	}
	fmt.Print(stats.Table(goExec, warm))
}
