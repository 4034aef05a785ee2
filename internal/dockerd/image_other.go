//go:build !linux

package dockerd

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/moby/moby/client"
)

// EnsureImage builds with debootstrap and chroot, on Linux only.
func EnsureImage(ctx context.Context, cli *client.Client, r Recipe, progress io.Writer) (string, error) {
	return "", fmt.Errorf("dockerd: building the sidecar image: %w", errors.ErrUnsupported)
}
