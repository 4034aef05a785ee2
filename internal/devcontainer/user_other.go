//go:build !unix

package devcontainer

import (
	"errors"
	"fmt"
)

// WorkspaceUser is Template.User for the workspace ws; it needs file
// ownership (Unix).
func WorkspaceUser(ws string) (string, error) {
	return "", fmt.Errorf("devcontainer: the owner of %s: %w", ws, errors.ErrUnsupported)
}
