//go:build !linux

package worker

import "io"

// pollable returns in as it is (see the Linux version).
func pollable(in io.Reader) io.Reader { return in }
