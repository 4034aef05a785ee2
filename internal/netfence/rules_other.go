//go:build !linux

package netfence

import "errors"

// ErrUnsupported: nftables exists only on Linux.
var ErrUnsupported = errors.New("netfence: only available on Linux")

// Apply is unsupported here.
func Apply(Config) error { return ErrUnsupported }

// Verify is unsupported here.
func Verify(Config) error { return ErrUnsupported }

// DisableIPv6 is unsupported here.
func DisableIPv6() error { return ErrUnsupported }

// Unfence is unsupported here.
func Unfence() error { return ErrUnsupported }
