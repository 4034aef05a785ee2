package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"vak/bench/internal/stats"
	"vak/internal/sandbox/landlock"
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
//     of its own costs. The same server run inside vak's sandbox (vak run
//     -i) times the same there, without the new session (see shell): what
//     fork and exec cost under the sandbox's namespaces, Landlock and
//     seccomp before any worker code, so the warm table separates the
//     sandbox's own cost from the worker's. And the floor of this design:
//     the same server over a pipe whose setsid is a seccomp user
//     notification answered by the landlock backend's supervisor
//     (landlock.Supervise) in a process of its own, as stage 1 answers
//     the worker's. The worker cannot start a command without that round
//     trip (the session tracking of notify_linux.go there), so this line
//     is the least any worker of the design costs. The alternative's
//     floor, where a cgroup v2 directory can be made: each command
//     started (clone3) in a new cgroup of its own, which cgroup.kill
//     would empty whatever sessions its processes made.

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

// runUsage runs the lean stage program n times with no arguments: it starts,
// prints its usage and exits 2, all a process start costs it.
func runUsage(n int, lean string) error {
	for range n {
		var ee *exec.ExitError
		if err := exec.Command(lean).Run(); !errors.As(err, &ee) || ee.ExitCode() != 2 {
			return fmt.Errorf("%s: %v, want its usage (exit 2)", lean, err)
		}
	}
	return nil
}

// floorShell runs `sh -c true` as the worker must: a new session, stdout
// and stderr captured.
func floorShell() error { return shell(true, -1) }

// shell runs `sh -c true` with stdout and stderr captured, in a new
// session if session is set. Inside the sandbox a new session is a
// round trip to the setsid supervisor (see the landlock backend's
// notify_linux.go), which classifies a process that is not the worker's
// child the long way; the worker's own commands take the short one, so
// the floor inside the sandbox makes no new session. With cgroup (a
// descriptor of a cgroup v2 directory, else -1) the command starts in
// that cgroup (clone3 with CLONE_INTO_CGROUP).
func shell(session bool, cgroup int) error {
	cmd := exec.Command("/bin/sh", "-c", "true")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if session {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if cgroup >= 0 {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		intoCgroup(cmd.SysProcAttr, cgroup)
	}
	return cmd.Run()
}

// shellInNewCgroup is shell in a cgroup made for the command under
// parent, removed once the command has ended: a cgroup per command, made
// and removed each time (a design could reuse an empty one).
func shellInNewCgroup(session bool, parent string) error {
	dir, err := os.MkdirTemp(parent, "cmd-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return shell(session, int(f.Fd()))
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

// floorServe is -floor-serve: floorShell for every line read from stdin
// (shell without a new session for a line "nosession"), and a line
// written back when it is done: how long it took in
// this process, in nanoseconds (or "error: " and what failed). Timed here,
// the number is the floor's cost wherever this process runs: inside vak's
// sandbox too, with none of the relay that carries the lines in and out.
// With notify (-floor-notify), it first makes its setsid calls seccomp
// user notifications and hands the listener to its supervisor on
// landlock.SupervisorFD (startNotifyFloor). With cgroup (-floor-cgroup DIR), each
// command starts in the cgroup v2 directory DIR (floorCgroup). With
// prefork (-floor-prefork), each command runs in a session leader started
// before its request came (preforked).
func floorServe(notify bool, cgroup string, prefork bool) {
	if notify {
		lineage, err := notifySetsid()
		if err != nil {
			fmt.Fprintf(os.Stderr, "floor-serve: %v\n", err)
			os.Exit(1)
		}
		defer runtime.KeepAlive(lineage)
	}
	run := func(session bool) error { return shell(session, -1) }
	if cgroup != "" {
		run = func(session bool) error { return shellInNewCgroup(session, cgroup) }
	}
	var next *preforked
	if prefork {
		run = func(bool) error { return next.run("true") }
	}
	startNext := func() {
		var err error
		if next, err = startPreforked(); err != nil {
			fmt.Fprintf(os.Stderr, "floor-serve: %v\n", err)
			os.Exit(1)
		}
	}
	if prefork {
		startNext()
	}
	in := bufio.NewReader(os.Stdin)
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			return
		}
		start := time.Now()
		err = run(line != "nosession\n")
		msg := strconv.FormatInt(int64(time.Since(start)), 10) + "\n"
		if err != nil {
			msg = "error: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
		}
		if _, err := os.Stdout.WriteString(msg); err != nil {
			return
		}
		if prefork {
			// The next leader starts after the answer, as a worker of
			// that design would start it, and the client waits for
			// "ready" (untimed) so that the start overlaps no other
			// contender's round trip.
			startNext()
			if _, err := os.Stdout.WriteString("ready\n"); err != nil {
				return
			}
		}
	}
}

// preforked is a session leader started ahead of its command, the floor
// of a design that forks the next command's process, and pays for its new
// session (in vak's sandbox, the setsid supervisor's round trip), between
// commands rather than while one waits: sh, in a new session with its
// output captured, that reads one line and then runs it as `sh -c LINE`.
type preforked struct {
	cmd         *exec.Cmd
	in          io.WriteCloser
	out, errOut bytes.Buffer
}

// startPreforked starts a preforked shell and returns once it waits for
// its line.
func startPreforked() (*preforked, error) {
	p := &preforked{cmd: exec.Command("/bin/sh", "-c", `echo >&3; exec 3>&-; read -r line && exec /bin/sh -c "$line"`)}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	ready, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer ready.Close()
	p.cmd.ExtraFiles = []*os.File{readyW}
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		readyW.Close()
		return nil, err
	}
	err = p.cmd.Start()
	readyW.Close()
	if err != nil {
		return nil, err
	}
	if _, err := ready.Read(make([]byte, 1)); err != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		return nil, fmt.Errorf("preforked shell: no ready line: %w", err)
	}
	return p, nil
}

// run gives the shell its command line and waits for it and its output.
func (p *preforked) run(line string) error {
	_, err := io.WriteString(p.in, line+"\n")
	p.in.Close()
	if werr := p.cmd.Wait(); err == nil {
		err = werr
	}
	return err
}

// startTimedServer starts argv, a command that ends in this program's
// -floor-serve or -warm-serve, and returns a round trip through it that
// sends request (a line: "run" or "nosession" for -floor-serve, anything
// for -warm-serve) and returns the time the server measured, and a stop
// function. extra are the server's descriptors from 3 on; started, if
// set, is called with its pid once it runs. A -floor-prefork server
// writes a second line once its next session leader waits: the round
// trip then returns the time from its request to the answer as measured
// here, and reads that line before it returns.
func startTimedServer(argv []string, request string, extra []*os.File, started func(pid int)) (func() (time.Duration, error), func(), error) {
	settles := slices.Contains(argv, "-floor-prefork")
	c := exec.Command(argv[0], argv[1:]...)
	c.ExtraFiles = extra
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
	if started != nil {
		started(c.Process.Pid)
	}
	br := bufio.NewReader(out)
	rt := func() (time.Duration, error) {
		start := time.Now()
		if _, err := io.WriteString(in, request+"\n"); err != nil {
			return 0, err
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
		wall := time.Since(start)
		ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s", strings.Join(argv, " "), strings.TrimSpace(line))
		}
		if settles {
			if ready, err := br.ReadString('\n'); ready != "ready\n" {
				return 0, fmt.Errorf("%s: %q, %v; want ready", strings.Join(argv, " "), ready, err)
			}
			return wall, nil
		}
		return time.Duration(ns), nil
	}
	return rt, func() { in.Close(); c.Wait() }, nil
}

// startNotifyFloor starts the floor over a pipe with vak's session
// tracking: this program's -floor-serve -floor-notify, whose setsid is a
// seccomp user notification (notifySetsid) answered by the landlock
// backend's own supervisor (landlock.Supervise) in a process of its own
// (this program's -notify-supervise), as stage 1 answers the worker's. It
// returns the round trip and a stop function, as startTimedServer; ok is
// false where there is no seccomp listener to hand over (not Linux).
// flags are more -floor-serve flags (-floor-prefork).
func startNotifyFloor(self string, flags ...string) (rt func() (time.Duration, error), stop func(), ok bool) {
	if !notifyFloorSupported {
		return nil, nil, false
	}
	local, remote, err := landlock.SupervisorPair()
	if err != nil {
		log.Fatal(err)
	}
	var sup *exec.Cmd
	rt, stopServer, err := startTimedServer(append([]string{self, "-floor-serve", "-floor-notify"}, flags...), "run", []*os.File{nil, remote}, func(pid int) { // remote is landlock.SupervisorFD
		sup = exec.Command(self, "-notify-supervise", strconv.Itoa(pid))
		sup.ExtraFiles = []*os.File{local}
		sup.Stderr = os.Stderr
		if err := sup.Start(); err != nil {
			log.Fatal(err)
		}
	})
	remote.Close()
	local.Close()
	if err != nil {
		log.Fatal(err)
	}
	// The supervisor ends once the server, the filter's only user, has.
	return rt, func() { stopServer(); sup.Wait() }, true
}

// notifySupervise is -notify-supervise PID: landlock.Supervise on
// descriptor 3 for the floor server PID (startNotifyFloor).
func notifySupervise(pid string) {
	n, err := strconv.Atoi(pid)
	if err != nil {
		log.Fatalf("-notify-supervise: %v", err)
	}
	landlock.Supervise(os.NewFile(3, "supervisor"), n)
}

// sandboxFloorArgv returns the command that runs this program's
// -floor-serve inside vak's landlock sandbox (vak run -i, config cfgFile):
// a copy of this program in a workspace of its own, dir, as the sandbox
// sees only its workspace and the system.
func sandboxFloorArgv(vak, cfgFile, dir string) ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(self)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "floor-serve")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		return nil, err
	}
	return []string{vak, "--config", cfgFile, "run", "-i", "-w", dir, "--", bin, "-floor-serve"}, nil
}

// floorSample names a floor in the tables.
func floorSample(name string) *stats.Sample { return &stats.Sample{Name: "floor: " + name} }
