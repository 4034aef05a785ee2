package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"vak/internal/config"
	"vak/internal/egress/admin"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/gateway"
	"vak/internal/egress/ondemand"
	"vak/internal/egress/proxy"
	"vak/internal/netfence"
	"vak/internal/paths"
	"vak/internal/proxynet"
	"vak/internal/sandbox"
	"vak/internal/sandbox/landlock"
)

// ServeNativeCommand is the hidden `vak gateway` subcommand that serves the
// on-demand gateway of the native fence (started by the first run that
// needs it; see ondemand).
const ServeNativeCommand = "serve-native"

func init() {
	// Stage 1 of the landlock sandbox runs in this program (vak __worker).
	landlock.FenceServer = func(dialData, dialDNS func(context.Context) (net.Conn, error), errLog *log.Logger) (func(), error) {
		l, err := netfence.ServeLocal(netfence.LocalConfig{}, dialData, dialDNS, errLog)
		if err != nil {
			return nil, err
		}
		return l.Close, nil
	}
}

// fenceNet is the host side of a native proxied run: a lease on the user's
// on-demand gateway (started if nothing answers) and the public trust
// files. The attachment carries the gateway's socket paths, the trust
// variables and the secret placeholders; release lets go of the gateway.
func (a *app) fenceNet(ctx context.Context) (*sandbox.NetworkAttachment, func(), error) {
	state, err := paths.EnsureStateDir()
	if err != nil {
		return nil, nil, err
	}
	bin := workerExecutable
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, nil, err
		}
	}
	lease, err := ondemand.Acquire(ctx, ondemand.Options{StateDir: state, SecretEnv: a.secretEnv(), Command: func(p ondemand.Paths) *exec.Cmd {
		var args []string
		if a.userConfig != "" {
			args = append(args, "--config", a.userConfig)
		}
		cmd := exec.Command(bin, append(args, "gateway", ServeNativeCommand)...)
		cmd.Dir = p.Dir
		return cmd
	}})
	if err != nil {
		return nil, nil, err
	}
	if lease.Warning != "" {
		a.warnf("%s", lease.Warning)
	}
	trust, err := trustFor(lease.Trust, lease.CACert)
	if err != nil {
		lease.Release()
		return nil, nil, fmt.Errorf("%w: trust files: %w", ondemand.ErrUnavailable, err)
	}
	return &sandbox.NetworkAttachment{
		Fence:    &sandbox.Fence{DataSocket: lease.Data, DNSSocket: lease.DNS, TrustDir: trust},
		Env:      proxynet.SandboxEnv(sandbox.FenceTrustDir, lease.Placeholders),
		TrustCA:  filepath.Join(sandbox.FenceTrustDir, proxynet.CAFile),
		TrustEnv: proxynet.TrustEnvAt(sandbox.FenceTrustDir),
	}, lease.Release, nil
}

// secretEnv is this process's values of the environment variables the
// on-demand gateway's secrets read (the gateway reads the user config
// only). A config that does not load gives none: the gateway reports it.
func (a *app) secretEnv() map[string]string {
	env := map[string]string{}
	// As gatewayLoader, without printing the config's warnings again.
	cfg, err := config.Load(config.Options{UserFile: a.userConfig})
	if err != nil || cfg.Egress == nil {
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
	if _, err := os.Stat(filepath.Join(dir, proxynet.TrustStoreFile)); err == nil {
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
		if _, serr := os.Stat(filepath.Join(dir, proxynet.TrustStoreFile)); serr != nil {
			return "", err
		}
	}
	return dir, nil
}

func (a *app) newGatewayServeNativeCmd() *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:    ServeNativeCommand,
		Hidden: true,
		Short:  "Serve the on-demand gateway of native proxied runs (started by vak run)",
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.serveNative(cmd.Context(), idle)
		},
	}
	cmd.Flags().DurationVar(&idle, "idle", ondemand.DefaultIdle, "stop after no run has used the gateway for this long")
	return cmd
}

// serveNative is `vak gateway serve-native`: the gateway with its
// transparent and DNS listeners on unix sockets of the on-demand directory,
// no TCP listener at all, until it has been idle (no run holding its
// lease) for idle, or SIGTERM (vak gc).
func (a *app) serveNative(ctx context.Context, idle time.Duration) error {
	if idle <= 0 {
		return exit(ExitUsage, errors.New("--idle must be positive"))
	}
	load, cfgFile, err := a.gatewayLoader("")
	if err != nil {
		return exit(ExitConfig, err)
	}
	state, err := paths.EnsureStateDir()
	if err != nil {
		return exit(ExitInternal, err)
	}
	p := ondemand.Layout(state)
	g, err := gateway.New(gateway.Options{
		Load:              load,
		ConfigFile:        cfgFile,
		StateDir:          state,
		Listen:            "-",
		TransparentListen: gateway.UnixPrefix + p.Data,
		TransparentMode:   proxy.ProxyProtocol,
		DNSListen:         gateway.UnixPrefix + p.DNS,
		AdminSocket:       p.Admin,
		HandleSIGHUP:      true,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(a.stdio.Err, "%s vak gateway: "+format+"\n", append([]any{time.Now().UTC().Format(time.RFC3339)}, args...)...)
		},
	})
	if err != nil {
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, egressconfig.ErrInvalid) {
			return exit(ExitConfig, err)
		}
		return exit(ExitUnavailable, err)
	}
	if err := ondemand.WritePID(p); err != nil {
		g.Close()
		return exit(ExitInternal, err)
	}
	st := g.Status().(gateway.Status)
	fmt.Fprintf(a.stdio.Err, "vak gateway: on-demand session %s, %d rule(s), %d secret(s); sockets in %s; stops after %v unused\n", st.Session, st.Rules, len(st.Secrets), p.Dir, idle)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		poll := min(max(idle/4, 10*time.Millisecond), 5*time.Second)
		if ondemand.WaitIdle(ctx, p, idle, poll) != nil {
			// The lease stays locked until this process exits.
			fmt.Fprintf(a.stdio.Err, "vak gateway: unused for %v, stopping\n", idle)
			cancel()
		}
	}()
	if err := g.Run(ctx); err != nil {
		return exit(ExitFailure, err)
	}
	return nil
}

// stopOnDemandGateway is vak gc's part for native proxied runs: it stops
// the user's on-demand gateway unless a run holds it.
func (a *app) stopOnDemandGateway(ctx context.Context) {
	state, err := paths.StateDir()
	if err != nil {
		return
	}
	stopped, err := ondemand.Stop(ctx, state)
	switch {
	case errors.Is(err, ondemand.ErrInUse):
	case err != nil:
		a.warnf("on-demand gateway: %v", err)
	case stopped:
		fmt.Fprintf(a.stdio.Out, "stopped the on-demand gateway of native proxied runs: no run uses it\n")
	}
}

// proxiedHow says, for vak doctor, how b would attach a proxied network and
// the state of the on-demand gateway a fence would use.
func (a *app) proxiedHow(ctx context.Context, b sandbox.Backend) string {
	kind, err := sandbox.ProxiedNetwork(b)
	if err != nil {
		return err.Error()
	}
	if kind == sandbox.NetworkTopology {
		return "the workspace's Docker topology"
	}
	state, err := paths.StateDir()
	if err != nil {
		return "a fenced namespace toward the on-demand gateway: " + err.Error()
	}
	p := ondemand.Layout(state)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := admin.NewClient(p.Admin).Status(ctx); err != nil {
		return "a fenced namespace toward the on-demand gateway in " + p.Dir + ", not running: the next proxied run starts it"
	}
	return "a fenced namespace toward the on-demand gateway in " + p.Dir + ", running"
}
