// Package paths names the host directories vak uses: the trusted user config,
// the per-user state directory (CA key, session sockets, receipts) and the
// per-workspace project config. None of them may ever be visible to a sandbox.
package paths

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Environment variables that relocate vak's directories (tests use them).
const (
	EnvConfigHome = "XDG_CONFIG_HOME"
	EnvStateHome  = "XDG_STATE_HOME"
)

// ProjectConfigDir is the untrusted, per-workspace config directory name.
const ProjectConfigDir = ".vak"

// ConfigFileName is the config file name in both the user and project dirs.
const ConfigFileName = "config.toml"

func home() (string, error) {
	h, err := os.UserHomeDir()
	if err != nil || h == "" {
		return "", fmt.Errorf("paths: cannot determine home directory: %w", errors.Join(err, errors.New("HOME unset")))
	}
	return h, nil
}

// ConfigDir is $XDG_CONFIG_HOME/vak, or ~/.config/vak.
func ConfigDir() (string, error) {
	if d := os.Getenv(EnvConfigHome); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "vak"), nil
	}
	h, err := home()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, ".config", "vak"), nil
}

// UserConfigFile is the trusted user config file path.
func UserConfigFile() (string, error) {
	d, err := ConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, ConfigFileName), nil
}

// StateDir is $XDG_STATE_HOME/vak, or ~/.local/state/vak. It holds secrets
// (the gateway CA key) and session sockets, so it is created 0700.
func StateDir() (string, error) {
	if d := os.Getenv(EnvStateHome); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "vak"), nil
	}
	h, err := home()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, ".local", "state", "vak"), nil
}

// EnsureStateDir creates the state directory (0700) and returns it. It refuses
// a state directory that others can read or write.
func EnsureStateDir() (string, error) {
	d, err := StateDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("paths: create state dir %s: %w", d, err)
	}
	fi, err := os.Stat(d)
	if err != nil {
		return "", fmt.Errorf("paths: stat state dir %s: %w", d, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(d, 0o700); err != nil {
			return "", fmt.Errorf("paths: state dir %s is accessible to others (%v) and cannot be fixed: %w", d, fi.Mode().Perm(), err)
		}
	}
	return d, nil
}

// ProjectConfigFile is <workspace>/.vak/config.toml.
func ProjectConfigFile(workspace string) string {
	return filepath.Join(workspace, ProjectConfigDir, ConfigFileName)
}

// ErrBadWorkspace reports a directory that cannot be a workspace.
var ErrBadWorkspace = errors.New("unusable workspace")

// CanonicalWorkspace resolves dir to the canonical absolute path vak uses for
// a workspace (symlinks resolved, so the same-path bind mount and the host
// file checks see one path). It refuses a workspace that is not a directory,
// is the root directory, or contains the user's home directory or vak's own
// config or state: mounting such a tree would hand the sandbox the very
// secrets it must not read.
func CanonicalWorkspace(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%w %q: %w", ErrBadWorkspace, dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%w %q: %w", ErrBadWorkspace, dir, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%w %q: %w", ErrBadWorkspace, dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w %q: not a directory", ErrBadWorkspace, dir)
	}
	if real == "/" {
		return "", fmt.Errorf("%w %q: the root directory cannot be a workspace", ErrBadWorkspace, dir)
	}
	var guarded []string
	if h, err := home(); err == nil {
		guarded = append(guarded, h)
	}
	if d, err := ConfigDir(); err == nil {
		guarded = append(guarded, d)
	}
	if d, err := StateDir(); err == nil {
		guarded = append(guarded, d)
	}
	for _, g := range guarded {
		if gr, err := filepath.EvalSymlinks(g); err == nil {
			g = gr
		}
		if Within(real, g) {
			return "", fmt.Errorf("%w %q: it contains %s, which a sandbox must never see", ErrBadWorkspace, dir, g)
		}
	}
	return real, nil
}

// Within reports whether p is root or inside it. Both must be clean absolute
// paths; no symlinks are resolved.
func Within(root, p string) bool {
	if root == "/" {
		return filepath.IsAbs(p)
	}
	return p == root || (len(p) > len(root) && p[:len(root)] == root && p[len(root)] == '/')
}

// The layout of a gateway's state directory, shared by the gateway (which
// owns it) and the proxied topology (which mounts and reads it) without the
// topology depending on the gateway's data plane.

// GatewayCADir is the CA directory inside a gateway state directory.
func GatewayCADir(stateDir string) string { return filepath.Join(stateDir, "ca") }

// GatewayAdminSocket is the admin socket inside a gateway state directory.
func GatewayAdminSocket(stateDir string) string { return filepath.Join(stateDir, "gateway.sock") }

// GatewayReceiptsDir holds the receipts logs inside a gateway state
// directory.
func GatewayReceiptsDir(stateDir string) string { return filepath.Join(stateDir, "receipts") }

// GatewayReceiptsKeyDir holds the Ed25519 key that signs receipts
// (receipts.key, 0600) and its public half (receipts.pub) inside a gateway
// state directory.
func GatewayReceiptsKeyDir(stateDir string) string { return filepath.Join(stateDir, "receipts-key") }
