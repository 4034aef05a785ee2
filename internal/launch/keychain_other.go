//go:build !darwin

package launch

import (
	"context"
	"errors"
	"fmt"
)

// keychainLogin is macOS only: elsewhere the CLIs keep their logins in
// files.
func keychainLogin(ctx context.Context, service string) ([]byte, error) {
	return nil, fmt.Errorf("the Keychain item %q: %w", service, errors.ErrUnsupported)
}
