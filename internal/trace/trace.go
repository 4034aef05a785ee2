// Package trace records how long the phases of one vak invocation take
// (vak run --trace, or VAK_TRACE=1) and prints them to stderr, so users and
// bug reports can see where the time goes. A nil *Trace records nothing:
// code on the hot path calls it unconditionally.
package trace

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"
)

// EnvVar turns tracing on when set to "1".
const EnvVar = "VAK_TRACE"

// Enabled reports whether the environment asks for a trace.
func Enabled() bool { return os.Getenv(EnvVar) == "1" }

// Span is one timed phase.
type Span struct {
	Name       string
	Start, End time.Time
}

// Trace collects spans. Its methods are safe for concurrent use and do
// nothing on a nil receiver.
type Trace struct {
	start time.Time
	mu    sync.Mutex
	spans []Span
}

// New starts a trace whose offsets are measured from start (the earliest
// moment the process knows of, e.g. when main began).
func New(start time.Time) *Trace { return &Trace{start: start} }

// Begin starts the phase name and returns the function that ends it.
func (t *Trace) Begin(name string) func() {
	if t == nil {
		return func() {}
	}
	s := time.Now()
	return func() { t.Add(name, s, time.Now()) }
}

// Add records a phase measured elsewhere.
func (t *Trace) Add(name string, start, end time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.spans = append(t.spans, Span{Name: name, Start: start, End: end})
	t.mu.Unlock()
}

// Spans returns the recorded spans in the order they were added.
func (t *Trace) Spans() []Span {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Span(nil), t.spans...)
}

// Print writes one line per phase (offset from the trace's start and
// duration, in milliseconds) and the total, in a form bench tools parse:
//
//	vak trace: config +0.412ms 0.318ms
func (t *Trace) Print(w io.Writer) {
	if t == nil {
		return
	}
	end := time.Now()
	spans := t.Spans()
	// By start: a phase's sub-phases (recorded before it ends) follow it.
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].Start.Before(spans[j].Start) })
	for _, s := range spans {
		fmt.Fprintf(w, "vak trace: %s +%.3fms %.3fms\n", s.Name, ms(s.Start.Sub(t.start)), ms(s.End.Sub(s.Start)))
	}
	fmt.Fprintf(w, "vak trace: total +0.000ms %.3fms\n", ms(end.Sub(t.start)))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type ctxKey struct{}

// With returns ctx carrying t.
func With(ctx context.Context, t *Trace) context.Context {
	if t == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, t)
}

// From returns the trace in ctx, or nil.
func From(ctx context.Context) *Trace {
	t, _ := ctx.Value(ctxKey{}).(*Trace)
	return t
}
