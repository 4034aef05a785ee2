//go:build !linux

package fsguard

import (
	"fmt"
	"runtime"
)

// errUnsupported is what every entry point returns off Linux: there is no
// equivalent of openat2(2) with RESOLVE_BENEATH here, and fsguard does not
// fall back to string checks.
var errUnsupported = fmt.Errorf("fsguard: %w on %s (openat2 with RESOLVE_BENEATH is Linux-only)", ErrUnsupported, runtime.GOOS)

// Open fails with ErrUnsupported on this platform.
func Open(workspace string, opts Options) (*Root, error) { return nil, errUnsupported }

// Close fails with ErrUnsupported on this platform.
func (r *Root) Close() error { return errUnsupported }

// Read fails with ErrUnsupported on this platform.
func (r *Root) Read(path string, offset, limit int64) (ReadResult, error) {
	return ReadResult{}, errUnsupported
}

// Write fails with ErrUnsupported on this platform.
func (r *Root) Write(path string, content []byte) error { return errUnsupported }

// Edit fails with ErrUnsupported on this platform.
func (r *Root) Edit(path, old, new string, replaceAll bool) (int, error) { return 0, errUnsupported }

// Glob fails with ErrUnsupported on this platform.
func (r *Root) Glob(pattern string, max int) (GlobResult, error) { return GlobResult{}, errUnsupported }

// Grep fails with ErrUnsupported on this platform.
func (r *Root) Grep(pattern, path, glob string, max int) (GrepResult, error) {
	return GrepResult{}, errUnsupported
}

// Root gives the file tools access to one workspace; on this platform Open
// never returns one.
type Root struct {
	path string
}
