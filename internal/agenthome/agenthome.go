// Package agenthome manages the private homes of sandboxed agents: the
// directory a sandbox sees as $HOME. A home is one of
//
//   - fresh: an empty private home per run (a tmpfs on the native backend,
//     the container's /tmp on docker), gone when the run ends;
//   - workspace: a persistent private home per canonical workspace path;
//   - profile:NAME: a persistent private home shared by every workspace
//     that names it.
//
// Persistent homes live in vak's state directory (paths.StateDir), never in
// the user's real home and never inside a workspace:
//
//	STATE/homes/workspace/HASH        the home (0700)
//	STATE/homes/workspace/HASH.path   the canonical workspace it belongs to
//	STATE/homes/profile/NAME          the home of profile NAME (0700)
//
// Everything inside a home is written by sandboxed code, so host-side
// handling (sizes, removal) never follows a link found in one: it uses
// fsguard's beneath-resolution walks. The homes/ tree above the leaves is
// vak's own and never visible to a sandbox.
package agenthome

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"vak/internal/paths"
	"vak/internal/sandbox"
)

// The choice of a home is sandbox.HomeChoice (config parses it without
// this package); these names are the same things.
type (
	Kind   = sandbox.HomeKind
	Choice = sandbox.HomeChoice
)

// Kinds of home.
const (
	Fresh     = sandbox.HomeFresh
	Workspace = sandbox.HomeWorkspace
	Profile   = sandbox.HomeProfile
)

var (
	// Default is sandbox.DefaultHome.
	Default = sandbox.DefaultHome
	// ErrInvalid is sandbox.ErrInvalidHome.
	ErrInvalid = sandbox.ErrInvalidHome
	// Parse is sandbox.ParseHome.
	Parse = sandbox.ParseHome
	// ValidateName is sandbox.ValidateProfileName.
	ValidateName = sandbox.ValidateProfileName
)

// MaxNameLen is sandbox.MaxProfileNameLen.
const MaxNameLen = sandbox.MaxProfileNameLen

// Root is STATE/homes.
func Root() (string, error) {
	d, err := paths.StateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "homes"), nil
}

// workspaceKey names a workspace's home: a hash of its canonical path.
func workspaceKey(ws string) string {
	sum := sha256.Sum256([]byte(ws))
	return hex.EncodeToString(sum[:12])
}

// Dir is the host directory of a persistent choice for the canonical
// workspace ws ("" for Fresh). It does not create anything.
func Dir(c Choice, ws string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	switch c.Kind {
	case Fresh:
		return "", nil
	case Workspace, "":
		if !filepath.IsAbs(ws) || filepath.Clean(ws) != ws {
			return "", fmt.Errorf("%w: workspace %q is not a canonical absolute path", ErrInvalid, ws)
		}
		return filepath.Join(root, string(Workspace), workspaceKey(ws)), nil
	case Profile:
		if err := ValidateName(c.Name); err != nil {
			return "", err
		}
		return filepath.Join(root, string(Profile), c.Name), nil
	}
	return "", fmt.Errorf("%w: unknown kind %q", ErrInvalid, c.Kind)
}

// Ensure returns the host directory of c for the canonical workspace ws,
// creating it (0700, owned by the invoking user) and its parents in the
// state directory; "" for Fresh. An existing directory that is a link, not
// a directory, or not the user's is refused: the sandbox never gets a home
// that vak did not make. The home never contains or lies inside the
// workspace (the state directory cannot be a workspace, see
// paths.CanonicalWorkspace).
func Ensure(c Choice, ws string) (string, error) {
	dir, err := Dir(c, ws)
	if err != nil || dir == "" {
		return "", err
	}
	if paths.Within(ws, dir) || paths.Within(dir, ws) {
		return "", fmt.Errorf("%w: home %s and workspace %s overlap", ErrInvalid, dir, ws)
	}
	if _, err := paths.EnsureStateDir(); err != nil {
		return "", err
	}
	root, _ := Root()
	for _, d := range []string{root, filepath.Dir(dir), dir} {
		if err := ownDir(d); err != nil {
			return "", err
		}
	}
	if c.Kind == Workspace || c.Kind == "" {
		rec := dir + pathSuffix
		if b, err := os.ReadFile(rec); err != nil || string(b) != ws+"\n" {
			if err := writeRecord(rec, ws); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// pathSuffix names the record of a workspace home's workspace.
const pathSuffix = ".path"

// writeRecord writes a workspace home's record atomically.
func writeRecord(rec, ws string) error {
	tmp, err := os.CreateTemp(filepath.Dir(rec), ".rec-*")
	if err != nil {
		return fmt.Errorf("agenthome: %w", err)
	}
	_, werr := tmp.WriteString(ws + "\n")
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), rec)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("agenthome: record %s: %w", rec, werr)
	}
	return nil
}

// ownDir creates d (0700) or checks that the existing d is a directory, not
// a link, owned by the user; it sets its mode to 0700.
func ownDir(d string) error {
	err := os.Mkdir(d, 0o700)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("agenthome: create %s: %w", d, err)
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return fmt.Errorf("agenthome: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is a %v, not a directory vak made", ErrInvalid, d, fi.Mode().Type())
	}
	if err := checkOwner(d, fi); err != nil {
		return err
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("agenthome: %s: %w", d, err)
		}
	}
	return nil
}
