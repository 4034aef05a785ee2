//go:build !unix

package logins

import (
	"errors"
	"fmt"
)

// lockFile is not available here: the store cannot be shared safely.
func lockFile(path string) (func(), error) {
	return nil, fmt.Errorf("locking %s: %w", path, errors.ErrUnsupported)
}
