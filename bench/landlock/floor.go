package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"vak/bench/internal/stats"
)

// Floors: what no implementation of the same design can avoid, timed in
// the same run as the contenders, so a ratio target can be checked against
// what is possible on the machine at all.
//
//   - cold: `vak run` is three starts of the vak binary one after the other
//     (the CLI, stage 1 in the new namespaces, stage 2 that restricts itself
//     and serves), before any sandbox work: the first floor runs `vak
//     version` three times, the second a minimal static Go program
//     (built here), the cost of three Go process starts of any size; and
//     util-linux unshare creating the same namespaces, their kernel cost.
//   - warm: a bash request is `sh -c COMMAND` as a session leader with its
//     stdout and stderr captured: floorShell does exactly that with os/exec
//     and nothing else (no protocol, no sandbox, no tripwire). The worker is
//     another process than its client (it is the sandbox): floorServe is
//     floorShell in a child process (this program again, -floor-serve)
//     asked over a pipe, one line each way, the least a worker in a process
//     of its own costs.

// walkNames walks the tree at root reading names only (getdents; the
// directory entries' types, no stat), as a check for entries at any depth
// must at least once per command.
func walkNames(root string) error {
	return filepath.WalkDir(root, func(string, fs.DirEntry, error) error { return nil })
}

// runTimes returns a function that runs argv n times, one after the
// other, as `vak run` starts its three processes.
func runTimes(n int, argv ...string) func() error {
	return func() error {
		for range n {
			if err := exec.Command(argv[0], argv[1:]...).Run(); err != nil {
				return fmt.Errorf("%q: %w", argv, err)
			}
		}
		return nil
	}
}

// buildHello builds a minimal static Go program (it writes one byte and
// exits) into dir and returns its path.
func buildHello(dir string) (string, error) {
	src := filepath.Join(dir, "hello")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	prog := "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.Write([]byte{'\\n'}) }\n"
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(prog), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "hello-bin")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build (hello): %w: %s", err, out)
	}
	return bin, nil
}

// floorShell runs `sh -c true` as the worker must: a new session, stdout
// and stderr captured.
func floorShell() error {
	cmd := exec.Command("/bin/sh", "-c", "true")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd.Run()
}

// unshareArgv is util-linux unshare creating the namespaces stage 1 is
// started in (user, mount, PID, network, IPC, UTS) around `true`: what the
// kernel charges for them, in a C program. nil when unshare is missing or
// cannot create them here (the row is then left out).
func unshareArgv(truePath string) []string {
	argv := []string{"unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--net", "--ipc", "--uts", truePath}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil
	}
	if err := exec.Command(argv[0], argv[1:]...).Run(); err != nil {
		return nil
	}
	return argv
}

// floorServe is -floor-serve: floorShell for every line read from stdin,
// a line written back when it is done.
func floorServe() {
	in := bufio.NewReader(os.Stdin)
	for {
		if _, err := in.ReadString('\n'); err != nil {
			return
		}
		msg := "ok\n"
		if err := floorShell(); err != nil {
			msg = strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
		}
		if _, err := os.Stdout.WriteString(msg); err != nil {
			return
		}
	}
}

// startFloorServer starts this program as -floor-serve and returns a
// round trip through it, and a stop function.
func startFloorServer() (func() error, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	c := exec.Command(self, "-floor-serve")
	in, err := c.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReader(out)
	rt := func() error {
		if _, err := io.WriteString(in, "run\n"); err != nil {
			return err
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("-floor-serve: %w", err)
		}
		if line != "ok\n" {
			return fmt.Errorf("-floor-serve: %s", strings.TrimSpace(line))
		}
		return nil
	}
	return rt, func() { in.Close(); c.Wait() }, nil
}

// floorSample names a floor in the tables.
func floorSample(name string) *stats.Sample { return &stats.Sample{Name: "floor: " + name} }
