package worker

import (
	"bufio"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"vak/internal/paths"
	"vak/internal/sandbox"
	"vak/internal/worker/wire"
)

// pollable turns a pipe into a polled duplicate (reads see the same data,
// a read deadline works, which only a polled file supports) and leaves
// anything else alone.
func TestPollable(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p := pollable(r)
	pf, ok := p.(*os.File)
	if !ok || pf == r {
		t.Fatalf("a pipe was not duplicated: %T", p)
	}
	defer pf.Close()
	if err := pf.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatalf("the duplicate is not polled: %v", err)
	}
	if _, err := pf.Read(make([]byte, 1)); !os.IsTimeout(err) {
		t.Fatalf("read with nothing written: %v, want a time-out", err)
	}
	pf.SetReadDeadline(time.Time{})
	io.WriteString(w, "line\n")
	if line, err := bufio.NewReader(pf).ReadString('\n'); err != nil || line != "line\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if pollable(f) != io.Reader(f) {
		t.Error("a device was replaced")
	}
	sr := strings.NewReader("x")
	if pollable(sr) != io.Reader(sr) {
		t.Error("a reader that is no file was replaced")
	}
}

// Run serves requests that arrive on a real pipe (made pollable) and ends
// when the pipe closes.
func TestRunOnPipes(t *testing.T) {
	ws, err := paths.CanonicalWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	spec := &Spec{Backend: "none", Workspace: ws, Mode: sandbox.WorkspaceWrite, Env: []string{"PATH=" + os.Getenv("PATH")}}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), spec, sandbox.WorkerOutcome{Description: "test"}, inR, outW)
		outW.Close()
	}()
	c := wire.NewClient(inW, outR)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r, err := c.Bash(ctx, wire.BashArgs{Command: "echo $((40 + " + string(rune('0'+i)) + "))"}, nil)
		if err != nil || r.Stdout != string(rune('0'+4))+string(rune('0'+i))+"\n" {
			t.Fatalf("bash %d: %v %+v", i, err, r)
		}
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not end when its input closed")
	}
	inR.Close()
}
