package worker

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"vak/internal/worker/wire"
)

// errCommandEnded answers input for an interactive command that is gone.
var errCommandEnded = errors.New("the command has ended")

// Interaction is the input side of an interactive bash request: the bytes
// of input requests (in order, each handed over only when the command reads
// it, which is the protocol's flow control), terminal resizes and signals.
type Interaction struct {
	pr *io.PipeReader
	pw *io.PipeWriter

	mu       sync.Mutex
	size     wire.TTYSize
	onResize func(wire.TTYSize)
	onSignal func(syscall.Signal) error
	signals  []syscall.Signal // received before the command started
	ended    bool
}

// signalNumbers maps wire.Signals to this system's numbers.
var signalNumbers = map[string]syscall.Signal{
	"INT":   syscall.SIGINT,
	"TERM":  syscall.SIGTERM,
	"HUP":   syscall.SIGHUP,
	"QUIT":  syscall.SIGQUIT,
	"USR1":  syscall.SIGUSR1,
	"USR2":  syscall.SIGUSR2,
	"WINCH": syscall.SIGWINCH,
}

// Signal delivers the signal named name (one of wire.Signals) to the
// command; one that arrives before the command started is delivered when
// it starts. It fails once the command ended.
func (it *Interaction) Signal(name string) error {
	if err := wire.CheckSignal(name); err != nil {
		return err
	}
	sig, ok := signalNumbers[name]
	if !ok {
		return wire.Errorf(wire.CodeUnsupported, "signal %q has no number here", name)
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	switch {
	case it.ended:
		return errCommandEnded
	case it.onSignal == nil:
		it.signals = append(it.signals, sig)
		return nil
	}
	return it.onSignal(sig)
}

// watchSignals delivers signals with f from now on, first the ones that
// arrived before. Holding the lock while f runs keeps it from running
// after end.
func (it *Interaction) watchSignals(f func(syscall.Signal) error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.onSignal = f
	for _, sig := range it.signals {
		f(sig)
	}
	it.signals = nil
}

// NewInteraction returns an Interaction whose terminal, if any, starts at
// size.
func NewInteraction(size wire.TTYSize) *Interaction {
	pr, pw := io.Pipe()
	return &Interaction{pr: pr, pw: pw, size: size}
}

// Input hands data to the command, blocking until it took it all; eof then
// ends its input. It fails once the command ended.
func (it *Interaction) Input(data []byte, eof bool) error {
	if len(data) > 0 {
		if _, err := it.pw.Write(data); err != nil {
			return err
		}
	}
	if eof {
		return it.pw.Close()
	}
	return nil
}

// Feed copies r to the command (Input), and ends the command's input where
// r ends. It returns then, or once the command ended.
func (it *Interaction) Feed(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if (n > 0 || err != nil) && it.Input(buf[:n], err != nil) != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

// Resize records a new terminal size and applies it if the terminal exists.
func (it *Interaction) Resize(sz wire.TTYSize) {
	it.mu.Lock()
	it.size = sz
	f := it.onResize
	it.mu.Unlock()
	if f != nil {
		f(sz)
	}
}

// Read reads the command's input (io.EOF after an input with eof).
func (it *Interaction) Read(p []byte) (int, error) { return it.pr.Read(p) }

// watchSize calls f with the current size and on every resize.
func (it *Interaction) watchSize(f func(wire.TTYSize)) {
	it.mu.Lock()
	it.onResize = f
	sz := it.size
	it.mu.Unlock()
	f(sz)
}

// end fails pending and later input and signals: the command is gone.
func (it *Interaction) end() {
	it.mu.Lock()
	it.ended = true
	it.mu.Unlock()
	it.pr.CloseWithError(errCommandEnded)
}

// relays copy an interactive command's input (and, on a terminal, its
// output) while it runs.
type relays struct {
	in      *Interaction
	child   []*os.File // the command's ends, closed here once it started
	slave   *os.File   // the terminal's slave, held until the command exits
	master  *os.File   // the terminal's master, or nil
	inPipe  *os.File   // the write end of the command's stdin pipe, or nil
	outDone chan struct{}
}

// interact wires cmd to in: through a new pseudo-terminal (tty) whose master
// stays in the worker, or a pipe.
func (x *Exec) interact(cmd *exec.Cmd, tty bool, in *Interaction, emit func(string, []byte)) (*relays, error) {
	r := &relays{in: in, outDone: make(chan struct{})}
	if !tty {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, wire.Errorf(wire.CodeExec, "stdin pipe: %v", err)
		}
		cmd.Stdin, r.child, r.inPipe = pr, []*os.File{pr}, pw
		close(r.outDone)
		go func() {
			io.Copy(pw, in)
			pw.Close()
		}()
		return r, nil
	}
	if len(x.Launcher) > 0 && !x.Subreaper {
		return nil, wire.Errorf(wire.CodeUnsupported, "a terminal needs commands that lead their own session")
	}
	master, slave, err := openPTY()
	if err != nil {
		return nil, wire.Errorf(wire.CodeUnsupported, "terminal: %v", err)
	}
	// The worker holds the slave until the command exited (finish): the
	// master then never reads the end of the terminal (EIO) while the
	// command runs, whatever the kernel's order of a last close and the
	// output before it.
	r.master, r.slave = master, slave
	if x.RawTerminal {
		if err := setRawInput(slave); err != nil {
			master.Close()
			slave.Close()
			return nil, wire.Errorf(wire.CodeUnsupported, "terminal: raw mode: %v", err)
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	again := &winchAgain{send: func() { winchForeground(master) }}
	in.watchSize(func(sz wire.TTYSize) {
		set := sz.Rows > 0 && sz.Cols > 0
		if set {
			setWinsize(master, sz)
		}
		if x.RawTerminal {
			again.sized(set)
		}
	})
	go typeInto(master, in)
	go func() {
		defer close(r.outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				emit("stdout", slices.Clone(buf[:n]))
			}
			if err != nil {
				return
			}
		}
	}()
	return r, nil
}

// relayWinchAgain are the delays after a resize at which a terminal of
// RawTerminal's kind gets SIGWINCH again. Its command is a relay such as
// the docker CLI of `docker exec -it`, which reads the size and resizes
// the terminal it relays to, and only then asks for SIGWINCH (docker/cli's
// MonitorTtySize): the signal of a resize in between is dropped, and the
// command would keep the old size until the next one. A signal again with
// the size unchanged costs the relay one resize to the same size.
var relayWinchAgain = []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond}

// winchAgain signals the foreground process group of a relay's terminal
// again relayWinchAgain after its last resize: a burst of resizes (a
// window dragged) costs the relay two resizes more, not two per resize.
// The first size is the command's start, which the relay reads itself,
// and a size that was not set (zero) changed nothing. Once the command
// ended and the master is closed, nothing is sent.
type winchAgain struct {
	send   func() // signals the foreground group
	mu     sync.Mutex
	sizes  int
	timers []*time.Timer
}

func (w *winchAgain) sized(set bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sizes++
	switch {
	case w.sizes == 1 || !set:
	case w.timers == nil:
		for _, d := range relayWinchAgain {
			w.timers = append(w.timers, time.AfterFunc(d, w.send))
		}
	default:
		for i, t := range w.timers {
			t.Reset(relayWinchAgain[i])
		}
	}
}

// typeInto types the input of in into the terminal whose master is master,
// and at its end what ends the terminal's input (endOfInput).
func typeInto(master *os.File, in *Interaction) {
	buf := make([]byte, 32<<10)
	var last byte
	typed := false
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := master.Write(buf[:n]); werr != nil {
				return
			}
			last, typed = buf[n-1], true
		}
		if errors.Is(err, io.EOF) {
			master.Write(endOfInput(master, last, typed))
			return
		}
		if err != nil {
			return
		}
	}
}

// started closes the command's ends of its terminal or pipe: the command
// holds them now.
func (r *relays) started() {
	for _, f := range r.child {
		f.Close()
	}
}

// finish runs after the command exited: input fails from now on, and the
// terminal's output is drained until every holder of the terminal closed
// it (processes the command left behind may hold it up to waitDelay).
func (r *relays) finish() {
	r.in.end()
	if r.master == nil {
		return
	}
	r.slave.Close()
	select {
	case <-r.outDone:
	case <-time.After(waitDelay):
	}
	r.master.Close()
	<-r.outDone
}
