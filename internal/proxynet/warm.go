package proxynet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// warmFile holds the time until which a workspace's topology is kept while
// no sandbox uses it: `vak run` leaves its proxied network warm for the
// next run instead of tearing it down (GC removes it once that time has
// passed).
func warmFile(stateDir, key string) string {
	return filepath.Join(stateDir, "proxynet", key, "warm-until")
}

// KeepWarm records that the workspace's topology stays up, idle, until
// until; a later KeepWarm replaces the time.
func KeepWarm(stateDir, workspace string, until time.Time) error {
	f := warmFile(stateDir, Key(workspace))
	if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
		return fmt.Errorf("proxynet: keep warm: %w", err)
	}
	if err := writeFileAtomic(f, []byte(until.UTC().Format(time.RFC3339Nano)+"\n"), 0o600); err != nil {
		return fmt.Errorf("proxynet: keep warm: %w", err)
	}
	return nil
}

// warmUntil returns the time KeepWarm recorded for key (zero if none).
func warmUntil(stateDir, key string) time.Time {
	b, err := os.ReadFile(warmFile(stateDir, key))
	if err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}
	}
	return t
}
