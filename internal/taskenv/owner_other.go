//go:build !linux

package taskenv

import "fmt"

// ownerToken needs /proc: sessions on other hosts have no owning process
// and end by idle timeout, lifetime or `vak session rm`.
func ownerToken(pid int) (string, error) {
	return "", fmt.Errorf("%w: session owner processes need Linux", ErrUnsupported)
}

// ownerAlive never judges a token here.
func ownerAlive(token string) (alive, known bool) { return false, false }
