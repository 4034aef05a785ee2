//go:build !linux

package fsguard

import (
	"context"
	"time"
)

// Watch keeps a Tree.Scan current (Linux only: inotify).
type Watch struct{}

// NewWatch returns a Watch whose Scan is Tree.Scan.
func NewWatch(ws string) *Watch { return &Watch{} }

// NewChangeWatch returns a Watch whose Scan is Tree.Scan.
func NewChangeWatch(ws string) *Watch { return &Watch{} }

// Close does nothing here.
func (w *Watch) Close() error { return nil }

// Err says why the Watch walks every time: it is unsupported here.
func (w *Watch) Err() error { return errUnsupported }

// Rebuilds is always 0 here.
func (w *Watch) Rebuilds() int { return 0 }

// Wait has no events to wait for here: it waits for ctx or d and reports
// false.
func (w *Watch) Wait(ctx context.Context, d time.Duration) bool { return sleepCtx(ctx, d) }

// Scan is t.Scan(setuid).
func (w *Watch) Scan(t *Tree, setuid bool) (Scan, error) { return t.Scan(setuid) }

// WatchLimit is 0 here.
func WatchLimit() int { return 0 }

// CheckWatch fails with ErrUnsupported here.
func CheckWatch(ws string) error { return errUnsupported }
