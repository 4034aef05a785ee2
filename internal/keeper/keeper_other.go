//go:build !linux

package keeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"vak/internal/fsguard"
)

var errUnsupported = fmt.Errorf("keeper: %w: a workspace keeper needs Linux's inotify", errors.ErrUnsupported)

// Serve fails with an error wrapping errors.ErrUnsupported.
func Serve(ctx context.Context, ws, sock string, idle time.Duration, ready func()) error {
	return errUnsupported
}

// Scan fails with an error wrapping errors.ErrUnsupported.
func Scan(sock string, t *fsguard.Tree, setuid bool) (Result, error) { return Result{}, errUnsupported }

// Run fails with an error wrapping errors.ErrUnsupported.
func Run(ctx context.Context, ws string) error { return errUnsupported }

// Start fails with an error wrapping errors.ErrUnsupported.
func Start(exe, ws string) (int, error) { return 0, errUnsupported }

// Running reports no keeper: there is none off Linux.
func Running(ws string) (int, error) { return 0, nil }
