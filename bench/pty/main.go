// Command pty measures the keystroke echo round trip through `vak run -t`
// (the user's terminal in raw mode, vak, the worker protocol, a terminal the
// worker allocates inside the sandbox, cat, and back) against the same
// round trip through script(1) without vak (raw mode, script's own
// terminal, cat). Each sample writes one byte to the outer terminal and
// waits until its echo comes back; contenders alternate by round.
//
// With -docker IMAGE it also measures the docker backend: `vak run
// --backend docker -t` (the docker CLI relays a terminal of the container,
// the command joined through docker exec) against `docker run -it` of the
// same image without vak.
//
//	go run ./bench/pty -n 2000 -rounds 5
//	go run ./bench/pty -n 2000 -rounds 5 -docker vak-test:latest
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/creack/pty"

	"vak/bench/internal/stats"
)

// baselineName names the container of the docker baseline.
var baselineName = fmt.Sprintf("vak-bench-pty-%d", os.Getpid())

func main() {
	n := flag.Int("n", 2000, "keystrokes per round")
	rounds := flag.Int("rounds", 5, "rounds per contender")
	image := flag.String("docker", "", "also measure the docker backend with this image")
	flag.Parse()
	vak, err := stats.BuildVak()
	if err != nil {
		log.Fatal(err)
	}
	ws, err := os.MkdirTemp("", "vak-bench-pty-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(ws)
	contenders := []struct {
		name string
		argv []string
	}{
		{"script -c cat (no vak)", []string{"script", "-qfc", "stty raw -echo; echo READY; cat", "/dev/null"}},
		{"vak run -t -- cat", []string{vak, "run", "-w", ws, "-t", "--", "sh", "-c", "stty raw -echo; echo READY; exec cat"}},
	}
	if *image != "" {
		cfg := ws + "/docker.toml"
		if err := os.WriteFile(cfg, []byte("version = 1\n[sandbox]\nbackend = \"docker\"\nimage = \""+*image+"\"\n"), 0o600); err != nil {
			log.Fatal(err)
		}
		contenders = append(contenders, []struct {
			name string
			argv []string
		}{
			// Killing the docker CLI leaves its container running: the
			// round removes it by name (see below).
			{"docker run -it (no vak)", []string{"docker", "run", "--rm", "-it", "--network", "none", "--label", "vak.bench=pty", "--name", baselineName, *image, "sh", "-c", "stty raw -echo; echo READY; exec cat"}},
			{"vak run --backend docker -t -- cat", []string{vak, "--config", cfg, "run", "-w", ws, "-t", "--", "sh", "-c", "stty raw -echo; echo READY; exec cat"}},
		}...)
	}
	samples := make([]*stats.Sample, len(contenders))
	for i := range samples {
		samples[i] = &stats.Sample{Name: contenders[i].name}
	}
	for r := 0; r < *rounds; r++ {
		for i, c := range contenders {
			err := round(c.argv, *n, samples[i])
			if slices.Contains(c.argv, baselineName) {
				exec.Command("docker", "rm", "-f", baselineName).Run()
			}
			if err != nil {
				log.Fatalf("%s: %v", c.name, err)
			}
		}
	}
	fmt.Print(stats.Table(samples[0], samples[1:2]...))
	if len(samples) > 2 {
		fmt.Println()
		fmt.Print(stats.Table(samples[2], samples[3:]...))
	}
}

// round starts argv on a new terminal and times n keystroke echoes.
func round(argv []string, n int, s *stats.Sample) error {
	master, slave, err := pty.Open()
	if err != nil {
		return err
	}
	defer master.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		return err
	}
	slave.Close()
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	chunks := make(chan []byte, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 4096)
			k, err := master.Read(buf)
			if k > 0 {
				chunks <- buf[:k]
			}
			if err != nil {
				return
			}
		}
	}()
	next := func(what string) ([]byte, error) {
		select {
		case c, ok := <-chunks:
			if !ok {
				return nil, fmt.Errorf("%s: the terminal closed", what)
			}
			return c, nil
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("%s: nothing for 30 s", what)
		}
	}
	// Wait until the inner side is ready (and the outer terminal raw).
	var seen []byte
	for !bytes.Contains(seen, []byte("READY")) {
		c, err := next(fmt.Sprintf("ready (seen %q)", seen))
		if err != nil {
			return err
		}
		seen = append(seen, c...)
	}
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := master.Write([]byte{'x'}); err != nil {
			return err
		}
		for got := false; !got; {
			c, err := next("echo")
			if err != nil {
				return err
			}
			got = bytes.IndexByte(c, 'x') >= 0
		}
		s.Add(time.Since(start))
	}
	if s.Median() <= 0 {
		return errors.New("no samples")
	}
	return nil
}
