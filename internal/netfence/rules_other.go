//go:build !linux

package netfence

import (
	"context"
	"errors"
	"log"
	"net"
)

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

// ApplyLocal is unsupported here.
func ApplyLocal(LocalConfig) error { return ErrUnsupported }

// VerifyLocal is unsupported here.
func VerifyLocal(LocalConfig) error { return ErrUnsupported }

// Local is a running native fence; there is none here.
type Local struct{}

// ServeLocal is unsupported here.
func ServeLocal(LocalConfig, func(context.Context) (net.Conn, error), func(context.Context) (net.Conn, error), *log.Logger) (*Local, error) {
	return nil, ErrUnsupported
}

// Close does nothing here.
func (*Local) Close() {}

// ApplyPod is unsupported here.
func ApplyPod(PodConfig) error { return ErrUnsupported }

// VerifyPod is unsupported here.
func VerifyPod(PodConfig) (string, error) { return "", ErrUnsupported }

// FencePod is unsupported here.
func FencePod(context.Context, PodConfig) (*PodReceipt, error) { return nil, ErrUnsupported }

// ProxiedPodSelfTest is unsupported here.
func ProxiedPodSelfTest(context.Context, Config) (*PodReceipt, error) { return nil, ErrUnsupported }
