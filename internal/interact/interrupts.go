package interact

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// interruptHintDelay is how long a command may take to end after a
// forwarded interrupt before vak says how to stop it.
const interruptHintDelay = time.Second

// interruptHint is what vak prints when a forwarded interrupt did not end
// the command (-i without a terminal).
const interruptHint = "vak: interrupt forwarded to the command; press Ctrl-C again to kill it\n"

// Interrupts decides what the signals vak receives do. SIGTERM and SIGHUP
// always tear the run down (they cancel the context of Notify),
// and so does SIGINT, except while an interactive command runs (arm): the
// first SIGINT then goes to the command (Ctrl-C reaches the agent, not
// vak), and only a second one tears down.
type Interrupts struct {
	cancel context.CancelFunc

	mu        sync.Mutex
	forward   chan string // while armed: signals for the command
	forwarded bool        // the one SIGINT of this command went to it
	hint      func()      // run once a forward did not end the command
}

// Notify returns a context that SIGTERM, SIGHUP and an
// unforwarded SIGINT cancel, the Interrupts that arm forwarding, and a
// stop function that releases the signals.
func Notify(ctx context.Context) (context.Context, *Interrupts, func()) {
	ctx, cancel := context.WithCancel(ctx)
	ir := &Interrupts{cancel: cancel}
	c := make(chan os.Signal, 4)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-c:
				if s != os.Interrupt || !ir.forwardInterrupt() {
					cancel()
				}
			}
		}
	}()
	return ctx, ir, func() {
		signal.Stop(c)
		close(done)
		cancel()
	}
}

// forwardInterrupt hands SIGINT to the armed command, if this is its first.
func (ir *Interrupts) forwardInterrupt() bool {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	if ir.forward == nil || ir.forwarded {
		return false
	}
	ir.forwarded = true
	select {
	case ir.forward <- "INT":
	default:
	}
	if ir.hint != nil {
		fwd := ir.forward
		time.AfterFunc(interruptHintDelay, func() {
			ir.mu.Lock()
			defer ir.mu.Unlock()
			if ir.forward == fwd && ir.hint != nil {
				ir.hint()
			}
		})
	}
	return true
}

// arm forwards the first SIGINT to an interactive command from now on, as
// a signal name on the returned channel (broker.Interaction.Signal), until
// disarm. hintTo, if set, gets interruptHint when the command is still
// running interruptHintDelay after the forward.
func (ir *Interrupts) Arm(hintTo io.Writer) (signals <-chan string, disarm func()) {
	ch := make(chan string, 1)
	ir.mu.Lock()
	ir.forward, ir.forwarded, ir.hint = ch, false, nil
	if hintTo != nil {
		ir.hint = func() { fmt.Fprint(hintTo, interruptHint) }
	}
	ir.mu.Unlock()
	return ch, func() {
		ir.mu.Lock()
		ir.forward, ir.hint = nil, nil
		ir.mu.Unlock()
	}
}
