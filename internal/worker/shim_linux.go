package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"vak/internal/worker/wire"
)

// A container-mode worker runs every command under a reap shim: the vak
// binary re-executed as `vak __reap --serve`, a child subreaper, so that a
// timeout finds the command's whole tree through parent links, even
// processes that left its session. Starting a Go binary costs a few
// milliseconds, more than a short command itself, so the worker keeps shims
// started ahead of need (warmShims): each waits on its control socket (fd
// 3) for one request, runs it with the stdio it was started with (pipes the
// worker holds), exits as the command did, and is never reused.

// shimRequest is what a warm shim is told to run.
type shimRequest struct {
	Argv []string `json:"argv"`
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
}

// warmWant is how many shims wait ready.
const warmWant = 3

type warmShims struct {
	self string
	reg  *childRegistry

	mu      sync.Mutex
	ready   []*warmShim
	filling bool
}

type warmShim struct {
	c              *exec.Cmd
	ctl            *os.File // our end of the control socket
	stdin          *os.File // write end of the command's stdin
	stdout, stderr *os.File // read ends of its output
}

func newWarmShims(self string, reg *childRegistry) *warmShims {
	w := &warmShims{self: self, reg: reg}
	go w.fill()
	return w
}

// spawn starts one shim.
func (w *warmShims) spawn() (*warmShim, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	unix.SetNonblock(fds[0], true) // pollable: reads of the ack get a deadline
	ours, theirs := os.NewFile(uintptr(fds[0]), "shim-ctl"), os.NewFile(uintptr(fds[1]), "shim-ctl")
	var files []*os.File // closed in this process once the shim has them
	pipe := func() (r, wr *os.File) {
		if err == nil {
			r, wr, err = os.Pipe()
		}
		return
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	files = append(files, theirs, inR, outW, errW)
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	if err != nil {
		closeAll(append(files, ours, inW, outR, errR)...)
		return nil, err
	}
	c := exec.Command(w.self, ReapCommand, "--serve")
	c.Args[0] = "vak-reap"
	c.Dir, c.Env = "/", []string{}
	c.Stdin, c.Stdout, c.Stderr = inR, outW, errW
	c.ExtraFiles = []*os.File{theirs}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = w.reg.start(c)
	closeAll(files...)
	if err != nil {
		closeAll(ours, inW, outR, errR)
		return nil, err
	}
	return &warmShim{c: c, ctl: ours, stdin: inW, stdout: outR, stderr: errR}, nil
}

// fill starts shims until warmWant are ready.
func (w *warmShims) fill() {
	w.mu.Lock()
	if w.filling {
		w.mu.Unlock()
		return
	}
	w.filling = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.filling = false
		w.mu.Unlock()
	}()
	for {
		w.mu.Lock()
		n := len(w.ready)
		w.mu.Unlock()
		if n >= warmWant {
			return
		}
		s, err := w.spawn()
		if err != nil {
			return
		}
		w.mu.Lock()
		w.ready = append(w.ready, s)
		w.mu.Unlock()
	}
}

func (w *warmShims) take() (*warmShim, error) {
	w.mu.Lock()
	var s *warmShim
	if n := len(w.ready); n > 0 {
		s, w.ready = w.ready[0], w.ready[1:]
	}
	empty := len(w.ready) == 0
	w.mu.Unlock()
	if empty {
		// A burst: start replacing now rather than after the command.
		go w.fill()
	}
	if s != nil {
		return s, nil
	}
	return w.spawn()
}

// hand gives the shim its request and waits for its acknowledgement, so a
// shim that died before (or while) taking it is known not to have run it.
func (s *warmShim) hand(req []byte) error {
	defer s.ctl.Close()
	if _, err := s.ctl.Write(req); err != nil {
		return err
	}
	s.ctl.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ack [1]byte
	if _, err := io.ReadFull(s.ctl, ack[:]); err != nil {
		return fmt.Errorf("no acknowledgement: %w", err)
	}
	return nil
}

// discard ends a shim that was not used (it died or the request failed).
func (s *warmShim) discard(reg *childRegistry) {
	s.ctl.Close()
	s.stdin.Close()
	s.c.Process.Kill()
	s.c.Wait()
	reg.done(s.c)
	s.stdout.Close()
	s.stderr.Close()
}

// run hands argv to a warm shim and returns the shim as the command's
// process. Output is copied to stdout and stderr until it ends, or until
// waitDelay after the shim exited (background children may hold it).
func (w *warmShims) run(argv []string, dir string, env []string, stdin *string, stdout, stderr io.Writer) (process, error) {
	req, err := json.Marshal(shimRequest{Argv: argv, Dir: dir, Env: env})
	if err != nil {
		return nil, err
	}
	req = append(req, '\n')
	s, err := w.take()
	if err != nil {
		return nil, err
	}
	if err = s.hand(req); err != nil {
		// That shim is dead (a process of the session may kill it): use a
		// fresh one.
		s.discard(w.reg)
		if s, err = w.spawn(); err != nil {
			return nil, err
		}
		if err = s.hand(req); err != nil {
			s.discard(w.reg)
			return nil, fmt.Errorf("reap shim: %w", err)
		}
	}
	p := &shimProcess{w: w, s: s, copied: make(chan struct{}, 2)}
	cp := func(dst io.Writer, src *os.File) {
		io.Copy(dst, src)
		p.copied <- struct{}{}
	}
	go cp(stdout, s.stdout)
	go cp(stderr, s.stderr)
	if stdin != nil {
		go func() {
			io.WriteString(s.stdin, *stdin)
			s.stdin.Close()
		}()
	} else {
		s.stdin.Close()
	}
	return p, nil
}

type shimProcess struct {
	w      *warmShims
	s      *warmShim
	copied chan struct{}
}

func (p *shimProcess) pid() int       { return p.s.c.Process.Pid }
func (p *shimProcess) cmd() *exec.Cmd { return p.s.c }

func (p *shimProcess) wait() error {
	err := p.s.c.Wait()
	// Replace the shim once the command is done, so that starting the
	// next one does not compete with it for the CPU.
	defer func() { go p.w.fill() }()
	t := time.NewTimer(waitDelay)
	defer t.Stop()
	for n := 0; n < 2; n++ {
		select {
		case <-p.copied:
		case <-t.C:
			// Output still held open by background processes: stop reading.
			p.s.stdout.Close()
			p.s.stderr.Close()
			for ; n < 2; n++ {
				<-p.copied
			}
			return err
		}
	}
	p.s.stdout.Close()
	p.s.stderr.Close()
	return err
}

// Reap is the reap shim (`vak __reap --serve`, or `vak __reap -- ARGV`):
// it makes itself a child subreaper, runs the command with its own stdio,
// and exits as the command did (dying of the same signal if the command
// was killed). With --serve it first reads one shimRequest from fd 3 and
// exits quietly if none comes. Orphans of the command's tree are
// re-parented to the shim, so the worker finds them through parent links.
func Reap(args []string) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "vak: %s: set child subreaper: %v\n", ReapCommand, err)
		return 126
	}
	var req shimRequest
	switch {
	case len(args) == 1 && args[0] == "--serve":
		ctl := os.NewFile(3, "ctl")
		line, err := bufio.NewReader(io.LimitReader(ctl, wire.MaxRequestBytes+1)).ReadBytes('\n')
		if err != nil {
			return 0 // the worker never used this shim
		}
		if err := json.Unmarshal(line, &req); err != nil || len(req.Argv) == 0 {
			fmt.Fprintf(os.Stderr, "vak: %s: bad request\n", ReapCommand)
			return 126
		}
		if _, err := ctl.Write([]byte{'1'}); err != nil {
			return 0 // the worker gave up on this shim
		}
		ctl.Close()
	case len(args) > 1 && args[0] == "--":
		req = shimRequest{Argv: args[1:], Env: os.Environ()}
	default:
		fmt.Fprintf(os.Stderr, "vak: %s: usage: %s --serve | -- ARGV\n", ReapCommand, ReapCommand)
		return 126
	}
	// The worker delivers an interactive command's signals to its process
	// group, which the shim is in (wire.OpSignal): the command gets them,
	// the shim lives on to report how it ended. Caught, not ignored: a
	// caught signal is reset at exec, an ignored one the command would
	// inherit.
	caught := make(chan os.Signal, 8)
	signal.Notify(caught, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for range caught {
		}
	}()
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	if req.Argv[0] == DefaultShell {
		cmd.Args[0] = "sh"
	}
	cmd.Dir, cmd.Env = req.Dir, req.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Start()
	if err == nil {
		// Only now may the worker signal the group (waitShimReady): a
		// signal before the handlers above were installed would have
		// killed the shim, not the command.
		os.WriteFile("/proc/self/comm", []byte(shimReadyComm), 0)
		err = cmd.Wait()
	}
	if err != nil && cmd.ProcessState == nil {
		fmt.Fprintf(os.Stderr, "vak: %v\n", err)
		var pe *os.PathError
		if errors.As(err, &pe) {
			return 127
		}
		return 126
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		sig := ws.Signal()
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig)
		time.Sleep(100 * time.Millisecond)
		return 128 + int(sig)
	}
	return cmd.ProcessState.ExitCode()
}

// shimReadyComm is the name (comm) a reap shim takes once it has caught
// the signals it passes on and started the command.
const shimReadyComm = "vak-reap-ready"

// shimReadyTimeout bounds waitShimReady: a shim that takes longer (a
// /proc without a writable comm) gets the signal anyway.
const shimReadyTimeout = 5 * time.Second

// waitShimReady waits until the reap shim pid has started its command
// (shimReadyComm), so that a signal for the command's group never reaches
// a shim whose Go runtime is still starting and would die of it. It
// returns errCommandEnded when the shim ended first.
func waitShimReady(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid)
	deadline := time.Now().Add(shimReadyTimeout)
	for {
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			return errCommandEnded
		}
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return errCommandEnded
		}
		if comm, err := os.ReadFile(dir + "/comm"); err == nil && string(bytes.TrimSpace(comm)) == shimReadyComm {
			return nil
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}
