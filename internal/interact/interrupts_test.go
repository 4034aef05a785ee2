package interact

import (
	"bytes"
	"context"
	"testing"
)

// TestForwardOnce shows that an armed command gets the first SIGINT and
// that the second one (or one while nothing is armed) is vak's own.
func TestForwardOnce(t *testing.T) {
	_, cancel := context.WithCancel(context.Background())
	defer cancel()
	ir := &Interrupts{cancel: cancel}
	if ir.forwardInterrupt() {
		t.Fatal("a SIGINT with nothing armed was forwarded")
	}
	var hint bytes.Buffer
	sigs, disarm := ir.Arm(&hint)
	if !ir.forwardInterrupt() {
		t.Fatal("the first SIGINT of an armed command was not forwarded")
	}
	if got := <-sigs; got != "INT" {
		t.Fatalf("forwarded %q, want INT", got)
	}
	if ir.forwardInterrupt() {
		t.Fatal("the second SIGINT was forwarded instead of tearing the run down")
	}
	disarm()
	if ir.forwardInterrupt() {
		t.Fatal("a SIGINT after disarm was forwarded")
	}
}

// TestMode shows -t's explicit value wins and -t implies -i; without
// terminals nothing is interactive unless asked.
func TestMode(t *testing.T) {
	for _, tc := range []struct {
		f                     Stdin
		wantTTY, wantInteract bool
	}{
		{Stdin{}, false, false},
		{Stdin{Interactive: true}, false, true},
		{Stdin{TTY: true, TTYSet: true}, true, true},
		{Stdin{TTY: false, TTYSet: true, Interactive: true}, false, true},
	} {
		tty, in := Mode(nil, tc.f, bytes.NewReader(nil), &bytes.Buffer{})
		if tty != tc.wantTTY || in != tc.wantInteract {
			t.Errorf("Mode(%+v) = tty %v, interactive %v; want %v, %v", tc.f, tty, in, tc.wantTTY, tc.wantInteract)
		}
	}
}

// TestSizeDefault: with no terminal the size is the default.
func TestSizeDefault(t *testing.T) {
	if got := Size(&bytes.Buffer{}, bytes.NewReader(nil)); got != DefaultSize {
		t.Fatalf("Size without a terminal = %+v, want %+v", got, DefaultSize)
	}
}
