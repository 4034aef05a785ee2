package launch

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"time"
)

// keychainLogin reads a login Claude Code keeps in the macOS Keychain
// (its generic password "Claude Code-credentials": the same JSON as
// ~/.claude/.credentials.json on Linux) with /usr/bin/security, which
// asks the user to allow the access when the item's ACL wants that.
func keychainLogin(ctx context.Context, service string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "/usr/bin/security", "find-generic-password", "-s", service, "-w")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		// security's message names the item, never its value.
		return nil, fmt.Errorf("reading the Keychain item %q: %w: %s", service, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return bytes.TrimSpace(out), nil
}
