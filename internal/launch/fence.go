package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"vak/internal/catrust"
	"vak/internal/config"
	"vak/internal/egress/ondemand"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
)

// ServeNativeCommand is the hidden `vak gateway` subcommand that serves the
// on-demand gateway of the native fence (started by the first run that
// needs it; see ondemand).
const ServeNativeCommand = "serve-native"

// fence is the host side of a native proxied run: a lease on the user's
// on-demand gateway (started if nothing answers) and the public trust
// files. The attachment carries the gateway's socket paths, the trust
// variables and the secret placeholders; admin is the gateway's admin
// socket (for the host only); release lets go of the gateway.
func fence(ctx context.Context, req Request) (att *sandbox.NetworkAttachment, admin string, release func(), err error) {
	state, err := paths.EnsureStateDir()
	if err != nil {
		return nil, "", nil, err
	}
	bin := req.Executable
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, "", nil, err
		}
	}
	lease, err := ondemand.Acquire(ctx, ondemand.Options{StateDir: state, SecretEnv: secretEnv(req.Config), Command: func(p ondemand.Paths) *exec.Cmd {
		var args []string
		if req.UserConfig != "" {
			args = append(args, "--config", req.UserConfig)
		}
		cmd := exec.Command(bin, append(args, "gateway", ServeNativeCommand)...)
		cmd.Dir = p.Dir
		return cmd
	}})
	if err != nil {
		return nil, "", nil, err
	}
	if lease.Warning != "" && req.Warn != nil {
		req.Warn(lease.Warning)
	}
	trust, err := trustFor(lease.Trust, lease.CACert)
	if err != nil {
		lease.Release()
		return nil, "", nil, fmt.Errorf("%w: trust files: %w", ondemand.ErrUnavailable, err)
	}
	return &sandbox.NetworkAttachment{
		Fence:    &sandbox.Fence{DataSocket: lease.Data, DNSSocket: lease.DNS, TrustDir: trust},
		Env:      proxynet.SandboxEnv(sandbox.FenceTrustDir, lease.Placeholders),
		TrustCA:  filepath.Join(sandbox.FenceTrustDir, catrust.CAFile),
		TrustEnv: catrust.Env(sandbox.FenceTrustDir),
	}, lease.Admin, lease.Release, nil
}

// secretEnv is this process's values of the environment variables the
// on-demand gateway's secrets read (the gateway reads the user config
// only), from the egress sections the caller's config already validated:
// the config is loaded once per start. Without them, none: the gateway
// reports a config that does not load.
func secretEnv(cfg *config.Config) map[string]string {
	env := map[string]string{}
	if cfg == nil || cfg.Egress == nil {
		return env
	}
	for _, sp := range cfg.Egress.Secrets {
		if sp.Source.Env != "" {
			env[sp.Source.Env] = os.Getenv(sp.Source.Env)
		}
	}
	return env
}

// trustFor returns a directory below root holding the trust files of the
// CA caPEM (proxynet.WriteTrust), one per CA, written once: concurrent runs
// never see a half-written file (each is made in a temp dir and renamed).
func trustFor(root string, caPEM []byte) (string, error) {
	sum := sha256.Sum256(caPEM)
	dir := filepath.Join(root, hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, catrust.StoreFile)); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, ".new-")
	if err != nil {
		return "", err
	}
	if err := proxynet.WriteTrust(tmp, caPEM, proxynet.SystemRoots()); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, serr := os.Stat(filepath.Join(dir, catrust.StoreFile)); serr != nil {
			return "", err
		}
	}
	return dir, nil
}
