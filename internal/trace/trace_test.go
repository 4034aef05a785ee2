package trace

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestNilTraceRecordsNothing(t *testing.T) {
	var tr *Trace
	tr.Begin("x")()
	tr.Add("y", time.Now(), time.Now())
	var b bytes.Buffer
	tr.Print(&b)
	if b.Len() != 0 || tr.Spans() != nil {
		t.Fatalf("nil trace printed %q", b.String())
	}
	if From(With(context.Background(), tr)) != nil {
		t.Fatal("nil trace stored in a context")
	}
}

func TestPrint(t *testing.T) {
	start := time.Now().Add(-10 * time.Millisecond)
	tr := New(start)
	tr.Add("config", start.Add(time.Millisecond), start.Add(3*time.Millisecond))
	tr.Begin("command")()
	if got := From(With(context.Background(), tr)); got != tr {
		t.Fatal("trace lost in the context")
	}
	var b bytes.Buffer
	tr.Print(&b)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", b.String())
	}
	if lines[0] != "vak trace: config +1.000ms 2.000ms" {
		t.Fatalf("line 1: %q", lines[0])
	}
	if !strings.HasPrefix(lines[1], "vak trace: command +") || !strings.HasPrefix(lines[2], "vak trace: total +0.000ms ") {
		t.Fatalf("lines: %q", lines)
	}
}
